
select user_id, page_url, `timestamp` as viewed_at, coalesce(referrer, 'direct') as referrer
from `landing__pageviews`

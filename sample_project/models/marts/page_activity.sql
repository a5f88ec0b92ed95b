select user_id, count(*) as views, min(viewed_at) as first_view, max(viewed_at) as last_view
from {{ ref('stg_pageviews') }}
group by user_id

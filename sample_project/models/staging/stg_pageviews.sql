{{ config(materialized='ephemeral') }}
select user_id, page_url, `timestamp` as viewed_at, coalesce(referrer, 'direct') as referrer
from {{ source('landing', 'pageviews') }}

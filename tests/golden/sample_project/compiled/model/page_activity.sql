WITH `stg_pageviews` AS (
  SELECT
    user_id,
    page_url,
    `timestamp` AS viewed_at,
    COALESCE(referrer, 'direct') AS referrer
  FROM `landing__pageviews`
)
SELECT
  user_id,
  COUNT(*) AS views,
  MIN(viewed_at) AS first_view,
  MAX(viewed_at) AS last_view
FROM `stg_pageviews`
GROUP BY
  user_id

SELECT `order_id`, COUNT(*) AS n_records
FROM `orders_enriched`
WHERE `order_id` IS NOT NULL
GROUP BY `order_id`
HAVING COUNT(*) > 1

SELECT `order_id`, COUNT(*) AS n_records
FROM `stg_orders`
WHERE `order_id` IS NOT NULL
GROUP BY `order_id`
HAVING COUNT(*) > 1

SELECT `customer_id`, COUNT(*) AS n_records
FROM `customer_orders`
WHERE `customer_id` IS NOT NULL
GROUP BY `customer_id`
HAVING COUNT(*) > 1

SELECT *
FROM `orders_enriched`
WHERE `order_id` IS NULL

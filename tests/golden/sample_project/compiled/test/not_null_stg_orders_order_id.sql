SELECT *
FROM `stg_orders`
WHERE `order_id` IS NULL

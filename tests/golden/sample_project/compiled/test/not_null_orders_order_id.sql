SELECT *
FROM `orders`
WHERE `order_id` IS NULL

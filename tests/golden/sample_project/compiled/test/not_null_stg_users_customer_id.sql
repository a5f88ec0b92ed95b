SELECT *
FROM `stg_users`
WHERE `customer_id` IS NULL

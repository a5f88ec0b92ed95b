SELECT `status`, COUNT(*) AS n_records
FROM `stg_orders`
WHERE `status` IS NOT NULL AND `status` NOT IN ('pending', 'paid', 'shipped', 'delivered', 'cancelled')
GROUP BY `status`

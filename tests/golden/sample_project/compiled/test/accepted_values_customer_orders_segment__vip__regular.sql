SELECT `segment`, COUNT(*) AS n_records
FROM `customer_orders`
WHERE `segment` IS NOT NULL AND `segment` NOT IN ('vip', 'regular')
GROUP BY `segment`

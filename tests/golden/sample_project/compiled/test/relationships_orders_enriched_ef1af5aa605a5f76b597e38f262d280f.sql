SELECT child.`customer_id`
FROM `orders_enriched` AS child
LEFT JOIN `stg_users` AS parent
  ON child.`customer_id` = parent.`customer_id`
WHERE child.`customer_id` IS NOT NULL AND parent.`customer_id` IS NULL

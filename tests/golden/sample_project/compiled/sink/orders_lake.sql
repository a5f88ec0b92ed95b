SELECT * FROM `orders_enriched`

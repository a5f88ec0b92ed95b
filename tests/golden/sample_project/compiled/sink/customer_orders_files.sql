SELECT * FROM `customer_orders`

SELECT * FROM `daily_revenue`

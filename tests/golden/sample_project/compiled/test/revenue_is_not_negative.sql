-- singular test: every returned row is a failure
select order_date, revenue
from `daily_revenue`
where revenue < 0

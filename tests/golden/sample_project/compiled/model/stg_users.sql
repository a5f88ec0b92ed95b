select
    user_id as customer_id,
    name,
    lower(email) as email,
    created_at as signed_up_at
from `shop__users`

{{ config(materialized='incremental', unique_key='order_id', tags=['finance']) }}
select
    o.order_id,
    o.customer_id,
    u.name as customer_name,
    o.product,
    o.quantity,
    o.total,
    o.status,
    o.order_date,
    o.created_at,
    ${region} as region
from {{ ref('stg_orders') }} o
left join {{ ref('stg_users') }} u on u.customer_id = o.customer_id
{% if is_incremental() %}
where o.created_at > (select max(created_at) from {{ this }})
{% endif %}

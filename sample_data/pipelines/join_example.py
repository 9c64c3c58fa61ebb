"""Revenue per customer: a two-input join followed by a reduce.

Inputs: ``orders`` (``order_id``, ``customer``, ``amount``) and ``customers``
(``customer``, ``region``). Output ``revenue`` (``region``, ``sum``): the total order
amount per region, at every time. Moving a customer to another region, cancelling an
order or adding one changes exactly the regions involved, at the time it happens.
"""


def pipeline(p):
    orders = p.input("orders")
    customers = p.input("customers")
    placed = orders.join(customers, on="customer")  # customer, order_id, amount, region
    p.output("revenue", placed.sum(by="region", column="amount"))

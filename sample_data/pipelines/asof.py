"""Bills priced as of each order: an as-of join.

Inputs ``orders`` (``order_id``, ``item``) and ``prices`` (``item``, ``price``) -> output
``bills`` (``order_id``, ``item``, ``price``): every order is billed the price its item
had at the order's time (price changes at that same time included). Later price changes
never change a bill already made.

Cancelling an order (retracting it at a later time) is priced like any change, as of the
cancellation's time: if the price is unchanged the bill disappears; if the price changed
in between, the old bill stays and a bill of -1 at the current price (a credit) appears.
See ops/operators/asof.py.

    ddcli ingest prices sample_data/prices_1.csv
    ddcli ingest orders sample_data/orders_asof_1.csv
    ddcli run sample_data/pipelines/asof.py
    ddcli ingest prices sample_data/prices_2.csv
    ddcli ingest orders sample_data/orders_asof_2.csv
    ddcli run sample_data/pipelines/asof.py
    ddcli history bills

(``orders`` here is not the ``orders`` of join_example.py: use a store of its own.)
``ddcli verify`` refuses this pipeline: its output depends on when each change happened,
which a from-scratch evaluation cannot see.
"""


def pipeline(p):
    orders = p.input("orders")
    prices = p.input("prices")
    p.output("bills", orders.as_of_join(prices, on="item"), key=["order_id"])

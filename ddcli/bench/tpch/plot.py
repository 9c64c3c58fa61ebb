"""The picture of ``ddcli bench tpch``: per query, DuckDB's recompute against ddcli's warm
refresh; and the whole workload's steps (base, ingests, runs) for each engine. Log scales:
the figures span four orders of magnitude."""

from __future__ import annotations

from ddcli.bench.common import save_figure


def plot_tpch(res: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(15, 5), gridspec_kw={"width_ratios": [3, 2]})
    pq = res["per_query"]
    queries = list(pq)
    x = range(len(queries))
    left.bar([i - 0.2 for i in x], [pq[q]["duckdb_recompute_s"] or 0 for q in queries], 0.4,
             label="DuckDB: recompute from scratch", color="C2")
    left.bar([i + 0.2 for i in x], [pq[q]["ddcli_refresh_s"] or 0 for q in queries], 0.4,
             label="ddcli: refresh (warm run, its pipeline's seconds)", color="C0")
    left.set_xticks(list(x), [q.upper() for q in queries], rotation=90)
    left.set_yscale("log")
    left.set_ylabel("seconds (median over the refreshes)")
    left.set_title(f"per query, refresh of {res['orders_per_refresh']:,} orders "
                   f"({res['refresh_fraction']:g}) + {res['customers_per_refresh']} customers")
    top = max([pq[q]["duckdb_recompute_s"] or 0 for q in queries] + [pq[q]["ddcli_refresh_s"] or 0 for q in queries])
    if top > 0:
        left.set_ylim(top=top * 10)  # room for the legend above the bars
    left.legend(loc="upper left", fontsize=8, ncol=2)
    s = res["summary"]
    bars = [("base ingest", s["base_ingest_s"], "C0"), ("first run (22)", s["first_run_s"], "C0"),
            ("Spark SQL (22, once)", s["spark_sql_s"], "C1"), ("DuckDB load", res["duckdb_load_s"], "C2"),
            ("DuckDB 22 (base)", s["duckdb_base_s"], "C2"), ("refresh ingest", s["refresh_ingest_s"], "C0"),
            ("warm refresh (22)", s["warm_refresh_s"], "C0"), ("cold refresh (22)", s["cold_refresh_s"], "C0"),
            ("DuckDB recompute (22)", s["duckdb_recompute_s"], "C2")]
    bars = [b for b in bars if b[1]]
    right.bar([b[0] for b in bars], [b[1] for b in bars], color=[b[2] for b in bars])
    right.set_yscale("log")
    right.set_ylabel("seconds")
    right.tick_params(axis="x", rotation=60)
    right.set_title("the workload: ddcli (blue), Spark SQL (orange), DuckDB (green)")
    met = sum(1 for a in res["aims"].values() if a["met"])
    fig.suptitle(f"ddcli bench tpch, scale {res['scale']:g}: {s['mismatches']} mismatches, aims met {met} of "
                 f"{len(res['aims'])} (load {res['load_average']:.1f} at the start, {res['cpus']} CPUs)")
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)

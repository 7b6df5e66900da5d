"""Grafana dashboards of the bridges, as code (grafana-foundation-sdk, the Grafana 11.6 build).

Why code and not exported JSON: the queries are written once, next to the metric names they read,
and reviewed as code; the JSON under ``dashboards/json/`` is generated from them
(``python -m dashboards``) and checked in so that it can be imported as it is. A unit test
regenerates it and fails when it is stale; the end-to-end tier runs every panel's query against a
real Prometheus that scraped the real bridges, and fails on one that returns nothing.
"""

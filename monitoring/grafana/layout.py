"""Turns the dashboard descriptions of panels.py into grafana-foundation-sdk dashboards.

Everything here is layout and wiring the three dashboards share: the provisioned
Prometheus datasource on every panel and query, the variables, rows of 8-unit-high panels
on Grafana's 24-column grid (a panel that does not fit beside the previous one starts a
new line), panel ids in order, the dashboards' common settings and their cross-links.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dashboard_builders
from grafana_foundation_sdk.builders import prometheus as prometheus_builders
from grafana_foundation_sdk.builders import table as table_builders
from grafana_foundation_sdk.builders import timeseries as timeseries_builders
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as dashboard_models
from grafana_foundation_sdk.models import prometheus as prometheus_models
from panels import Dashboard, Panel, Variable

# monitoring/grafana/provisioning/datasources/prometheus.yml provisions this uid.
DATASOURCE = dashboard_models.DataSourceRef(type_val="prometheus", uid="dts-prometheus")
GRID_COLUMNS = 24
PANEL_HEIGHT = 8
# The dashboard JSON model version the files declare. The SDK defaults to 36; these files
# have declared 39 (Grafana 10.4) since they were written, and what the SDK writes for
# them is valid at 39, so Grafana runs no migrations when it loads them.
SCHEMA_VERSION = 39
# Tables list the values of every query side by side; this sorts them by the first one.
FIRST_QUERY_COLUMN = "Value #A"


def query(expr: str, legend: str, ref_id: str, instant: bool) -> prometheus_builders.Dataquery:
    target = (
        prometheus_builders.Dataquery()
        .ref_id(ref_id)
        .datasource(DATASOURCE)
        .expr(expr)
        .legend_format(legend)
    )
    if instant:  # one value per series, as table rows
        target = target.instant().format(prometheus_models.PromQueryFormat.TABLE)
    return target


def panel(
    spec: Panel, panel_id: int, grid_pos: dashboard_models.GridPos
) -> Builder[dashboard_models.Panel]:
    instant = spec.kind == "table"  # a table shows one value per series
    builder: timeseries_builders.Panel | table_builders.Panel
    if instant:
        builder = (
            table_builders.Panel()
            .show_header(True)
            .sort_by([common_builders.TableSortByFieldState().display_name(FIRST_QUERY_COLUMN)])
            # The queries' frames merged into one: a row per series, a column per query.
            .with_transformation(dashboard_models.DataTransformerConfig(id_val="merge", options={}))
        )
    else:
        builder = timeseries_builders.Panel().legend(
            common_builders.VizLegendOptions()
            .display_mode(common.LegendDisplayMode.LIST)
            .placement(common.LegendPlacement.BOTTOM)
            .show_legend(True)
        )
    builder = (
        builder.id(panel_id)
        .title(spec.title)
        .datasource(DATASOURCE)
        .grid_pos(grid_pos)
        .unit(spec.unit)
        .targets(
            [
                query(expr, legend, chr(ord("A") + i), instant)
                for i, (expr, legend) in enumerate(spec.targets)
            ]
        )
    )
    if spec.description:
        builder = builder.description(spec.description)
    return builder


def variable(v: Variable) -> dashboard_builders.QueryVariable:
    """A multi-value variable over the values of ``v.label`` on ``v.metric``, All by default."""
    return (
        dashboard_builders.QueryVariable(v.name)
        # Grafana keys its variable state by id and falls back to the name; the SDK's
        # default id is one fixed UUID, which two variables of a dashboard would share.
        .id(v.name)
        .label(v.name.capitalize())
        .hide(dashboard_models.VariableHide.DONT_HIDE)
        .datasource(DATASOURCE)
        .query({"query": f"label_values({v.metric}, {v.label})", "refId": v.name})
        .include_all(True)
        .multi(True)
        .all_value(".*")
        .current(dashboard_models.VariableOption(selected=True, text=["All"], value=["$__all"]))
        .refresh(dashboard_models.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dashboard_models.VariableSort.ALPHABETICAL_ASC)
    )


def dashboard(d: Dashboard) -> dashboard_models.Dashboard:
    board = (
        dashboard_builders.Dashboard(d.title)
        .uid(d.uid)
        .description(d.description)
        .tags(["dts"])
        .timezone("browser")
        .editable()
        .tooltip(dashboard_models.DashboardCursorSync.OFF)
        .version(1)
        .refresh("10s")
        .time("now-1h", "now")
        .annotations([])
        .link(
            dashboard_builders.DashboardLink("DTS")
            .type(dashboard_models.DashboardLinkType.DASHBOARDS)
            .tags(["dts"])
            .as_dropdown(True)
        )
        .variables(
            [variable(v) for v in [Variable("table", d.table_source, "table"), *d.extra_variables]]
        )
    )
    # Rows stay expanded, so each row's panels follow it on the dashboard rather than
    # inside it (Grafana keeps a panel inside a row only while the row is collapsed).
    y = 0
    next_id = 1
    for row_title, row_panels in d.rows:
        row = (
            dashboard_builders.Row(row_title)
            .id(next_id)
            .collapsed(False)
            .grid_pos(dashboard_models.GridPos(h=1, w=GRID_COLUMNS, x=0, y=y))
        )
        board = board.with_row(row)
        next_id += 1
        y += 1
        x = 0
        for spec in row_panels:
            if x + spec.width > GRID_COLUMNS:
                x, y = 0, y + PANEL_HEIGHT
            grid_pos = dashboard_models.GridPos(h=PANEL_HEIGHT, w=spec.width, x=x, y=y)
            board = board.with_panel(panel(spec, next_id, grid_pos))
            next_id += 1
            x += spec.width
        y += PANEL_HEIGHT
    model = board.build()
    model.schema_version = SCHEMA_VERSION  # no builder method sets it
    return model

"""The dashboard web application (Starlette): pages, a JSON API, live events, health.

Pages are thin HTML shells; their script fetches `/api/...` (data and Plotly
figure specifications built by `figures`) and follows `/events`, a
server-sent-event stream of verdicts as they arrive. Every asset, Plotly.js
included, is served by the application itself so the dashboard works offline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from perfwatch import __version__
from perfwatch.adapters.verdict_feed import unknown_kind_error
from perfwatch.config import Config
from perfwatch.dashboard import figures, queries
from perfwatch.dashboard.analysis import ChangePointAnalysis
from perfwatch.dashboard.live import TopicListener, TopicSettings, VerdictHub, decode_verdict
from perfwatch.state import SeriesKey, StateStore, StoreError, StoreUnavailable, open_store

log = logging.getLogger("perfwatch.dashboard")

_PACKAGE_DIR = Path(str(resources.files("perfwatch.dashboard")))
_KEEPALIVE_S = 15.0


def plotly_js_path() -> Path:
    """Plotly.js as bundled in the `plotly` Python package (no CDN)."""
    return Path(str(resources.files("plotly"))) / "package_data" / "plotly.min.js"


class JSONResponse(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY)


@dataclass
class DashboardSettings:
    """What the application reads and how often it polls; `config` gives the analyzer
    parameters and metric directions the processor uses."""

    store_url: str
    topic: TopicSettings | None = None
    poll_interval_s: float = 2.0
    title: str = "perfwatch"
    config: Config = field(default_factory=Config)


class DashboardState:
    """The store, the hub and the sources feeding it, for one running application."""

    def __init__(self, settings: DashboardSettings) -> None:
        self.settings = settings
        self.analysis = ChangePointAnalysis(settings.config)
        self.store: StateStore | None = None
        self.hub: VerdictHub | None = None
        self.listener: TopicListener | None = None
        self.last_seq = 0
        # one poll at a time: two overlapping polls would send their verdicts interleaved
        self._polling = threading.Lock()

    def require_store(self) -> StateStore:
        if self.store is None:
            raise HTTPException(503, "the state store is not open")
        return self.store

    # --- live sources -----------------------------------------------------------------

    def event_for(self, item: dict[str, Any]) -> dict[str, Any]:
        """The event a browser receives: the feed item and, for a series, its new summary."""
        summary = None
        if item["series_key"]:
            key = SeriesKey.from_canonical(item["series_key"])
            summary = queries.series_summary(self.require_store(), key, self.analysis)
        return {"item": item, "series": summary}

    def on_topic_message(self, data: bytes) -> None:
        """Called from the listener thread for each message on the verdicts topic."""
        assert self.hub is not None
        document = decode_verdict(data)
        if document is None or not isinstance(document.get("verdict_id"), str):
            log.warning("a message on the verdicts topic is not a verdict; ignored")
            return
        if not self.hub.first_sighting(document["verdict_id"]):
            return
        item = queries.document_item(document)
        self.hub.publish(self.event_for(item))

    def poll_store(self) -> int:
        """Send verdicts committed since the last poll; the number sent."""
        assert self.hub is not None
        sent = 0
        with self._polling:
            for entry in queries.verdicts_after(self.require_store(), self.last_seq):
                self.last_seq = max(self.last_seq, entry.seq)
                if not self.hub.first_sighting(entry.verdict_id):
                    continue
                item = queries.feed_item(entry)
                self.hub.publish(self.event_for(item))
                sent += 1
        return sent


def _state(request: Request) -> DashboardState:
    return request.app.state.dashboard


def _query_key(request: Request) -> SeriesKey:
    text = request.query_params.get("key")
    if not text:
        raise HTTPException(400, "query parameter 'key' (the series key) is required")
    try:
        return queries.parse_series_key(text)
    except ValueError as err:
        raise HTTPException(400, str(err)) from None


def _query_int(request: Request, name: str, default: int | None, low: int, high: int) -> int | None:
    text = request.query_params.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise HTTPException(
            400, f"query parameter {name!r}: expected an integer, got {text!r}"
        ) from None
    if not low <= value <= high:
        raise HTTPException(400, f"query parameter {name!r}: expected {low}..{high}, got {value}")
    return value


# --- pages --------------------------------------------------------------------------------


def _page(template: str, title: str) -> Callable[[Request], Any]:
    async def endpoint(request: Request) -> Response:
        templates: Jinja2Templates = request.app.state.templates
        return templates.TemplateResponse(
            request,
            template,
            {
                "page_title": title,
                "site_title": _state(request).settings.title,
                "version": __version__,
            },
        )

    return endpoint


# --- API --------------------------------------------------------------------------------


async def api_series(request: Request) -> Response:
    state = _state(request)
    series = await run_in_threadpool(queries.list_series, state.require_store(), state.analysis)
    return JSONResponse({"series": series})


async def api_verdicts(request: Request) -> Response:
    store = _state(request).require_store()
    limit = _query_int(request, "limit", 100, 1, 10_000)
    before = _query_int(request, "before", None, 1, 2**62)
    kinds = [k for k in request.query_params.getlist("kind") if k]
    for kind in kinds:
        if (error := unknown_kind_error(kind)) is not None:
            raise HTTPException(400, f"query parameter 'kind': {error}")
    test = request.query_params.get("test") or None
    items = await run_in_threadpool(
        lambda: queries.verdict_feed(
            store, limit=limit or 100, before_seq=before, kinds=kinds, test_glob=test
        )
    )
    return JSONResponse({"verdicts": items})


async def api_series_detail(request: Request) -> Response:
    state = _state(request)
    key = _query_key(request)
    x_axis = request.query_params.get("x") or "run"
    if x_axis not in figures.X_AXES:
        known = ", ".join(figures.X_AXES)
        raise HTTPException(400, f"query parameter 'x': expected one of {known}, got {x_axis!r}")
    detail = await run_in_threadpool(
        queries.series_detail, state.require_store(), key, state.analysis
    )
    if detail is None:
        raise HTTPException(404, f"no series {key.canonical}")
    return JSONResponse({"series": detail, "figure": figures.series_figure(detail, x_axis)})


async def api_counters(request: Request) -> Response:
    store = _state(request).require_store()
    test = request.query_params.get("test") or None
    checks = await run_in_threadpool(queries.counter_checks, store, test)
    if test is not None and not checks:
        raise HTTPException(404, f"no counter-check verdict for test {test!r}")
    wanted = request.query_params.get("verdict")
    selected = next((c for c in checks if c["verdict_id"] == wanted), None) if wanted else None
    if wanted and selected is None:
        raise HTTPException(404, f"no counter-check verdict {wanted!r}")
    selected = selected or (checks[0] if checks else None)
    block = selected["verdict"].get("counter_check", {}) if selected else {}
    return JSONResponse(
        {
            "checks": [
                {k: c[k] for k in ("seq", "verdict_id", "kind", "facts", "run")} for c in checks
            ],
            "selected": selected,
            "header": queries.counter_header(selected) if selected else None,
            "figures": figures.counter_figures(block) if selected else None,
        }
    )


async def api_inputs(request: Request) -> Response:
    store = _state(request).require_store()
    params = request.query_params
    try:
        view = await run_in_threadpool(
            queries.inputs_view,
            store,
            test=params.get("test") or None,
            verdict_id=params.get("verdict") or None,
            x_attribute=params.get("x") or None,
            y_attribute=params.get("y") or None,
        )
    except LookupError as err:
        raise HTTPException(404, str(err.args[0])) from None
    except ValueError as err:
        raise HTTPException(400, str(err)) from None
    if view["selected"] is not None:
        view["figure"] = figures.inputs_figure(
            view["profiles"], view["labels"], view["votes"], view["x"], view["y"]
        )
    colours = figures.cluster_colours(view["labels"])
    view["sample_figures"] = {
        "shift": figures.shift_figure(view["shifts"], colours),
        "clusters": figures.cluster_change_figure(view["shifts"], colours),
    }
    return JSONResponse(view)


async def api_resources(request: Request) -> Response:
    store = _state(request).require_store()
    params = request.query_params
    try:
        data = await run_in_threadpool(
            queries.resources_over_commits,
            store,
            params.get("time_metric") or None,
            params.get("memory_metric") or None,
        )
    except LookupError as err:
        raise HTTPException(404, str(err.args[0])) from None
    return JSONResponse({**data, "figures": figures.resources_figures(data)})


async def healthz(request: Request) -> Response:
    """200 when the store answers; says whether the topic is followed."""
    state = _state(request)
    listener = state.listener
    topic = (
        "off"
        if listener is None
        else ("connected" if listener.connected.is_set() else "connecting")
    )
    try:
        series = await run_in_threadpool(state.require_store().series_count)
    except (StoreError, HTTPException) as err:
        return JSONResponse({"status": "unavailable", "error": str(err), "topic": topic}, 503)
    return JSONResponse(
        {
            "status": "ok",
            "series": series,
            "topic": topic,
            "topic_error": None if listener is None else listener.last_error,
            "clients": 0 if state.hub is None else state.hub.subscribers,
        }
    )


async def events(request: Request) -> Response:
    """Server-sent events: `verdict` per new verdict, a comment every 15 s to keep it open."""
    state = _state(request)
    assert state.hub is not None
    hub = state.hub
    queue = hub.subscribe()

    async def stream() -> AsyncIterator[bytes]:
        try:
            yield b"retry: 2000\nevent: hello\ndata: {}\n\n"
            while True:
                try:
                    event = await asyncio.wait_for(queue.get(), _KEEPALIVE_S)
                except TimeoutError:
                    yield b": keep-alive\n\n"
                    continue
                verdict_id = event["item"]["verdict_id"]
                yield (
                    f"id: {verdict_id}\nevent: verdict\ndata: ".encode()
                    + orjson.dumps(event)
                    + b"\n\n"
                )
        finally:
            hub.unsubscribe(queue)

    return StreamingResponse(
        stream(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def plotly_js(request: Request) -> Response:
    return FileResponse(plotly_js_path(), media_type="text/javascript")


# --- application --------------------------------------------------------------------------


# While the topic delivers, the store is read this seldom: only verdicts committed
# but not yet published (or a topic message lost) are left for it to find.
_POLL_WHILE_FOLLOWING_S = 30.0


async def _poll_forever(state: DashboardState) -> None:
    failing_since: float | None = None  # said once when the store stops answering, once back
    while True:
        interval = state.settings.poll_interval_s
        if state.listener is not None and state.listener.connected.is_set():
            interval = max(interval, _POLL_WHILE_FOLLOWING_S)
        await asyncio.sleep(interval)
        try:
            await run_in_threadpool(state.poll_store)
        except StoreError as err:
            if failing_since is None:
                failing_since = time.monotonic()
                log.warning("polling the state store failed", extra={"error": str(err)})
            continue
        if failing_since is not None:
            outage_s = round(time.monotonic() - failing_since, 1)
            failing_since = None
            log.info("the state store answers again", extra={"outage_s": outage_s})


async def _store_unavailable(request: Request, error: Exception) -> Response:
    """A database that does not answer is an outage, as /healthz says: 503 with the reason,
    not a 500 and a traceback per request."""
    log.warning("the state store is unavailable", extra={"error": str(error)})
    return Response(f"state store unavailable: {error}", 503, media_type="text/plain")


def create_app(settings: DashboardSettings) -> Starlette:
    """The ASGI application; the store is opened and the live sources started on startup."""
    state = DashboardState(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        state.store = await run_in_threadpool(open_store, settings.store_url)
        state.hub = VerdictHub(asyncio.get_running_loop())
        # Live events start after what the store already holds: the pages load that.
        state.last_seq = await run_in_threadpool(queries.latest_seq, state.store)
        poller = asyncio.create_task(_poll_forever(state))
        if settings.topic is not None:
            state.listener = TopicListener(settings.topic, state.on_topic_message)
            state.listener.start()
        try:
            yield
        finally:
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller
            if state.listener is not None:
                await run_in_threadpool(state.listener.stop)
            state.store.close()

    routes = [
        Route("/", _page("overview.html", "Overview")),
        Route("/series", _page("series.html", "Series")),
        Route("/counters", _page("counters.html", "Counter check")),
        Route("/inputs", _page("inputs.html", "Run or skip")),
        Route("/resources", _page("resources.html", "Time and memory")),
        Route("/api/series", api_series),
        Route("/api/series/detail", api_series_detail),
        Route("/api/verdicts", api_verdicts),
        Route("/api/counters", api_counters),
        Route("/api/inputs", api_inputs),
        Route("/api/resources", api_resources),
        Route("/events", events),
        Route("/healthz", healthz),
        Route("/static/vendor/plotly.min.js", plotly_js),
        Mount("/static", StaticFiles(directory=_PACKAGE_DIR / "static"), name="static"),
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={StoreUnavailable: _store_unavailable},
    )
    app.state.dashboard = state
    app.state.templates = Jinja2Templates(directory=_PACKAGE_DIR / "templates")
    return app

"""An individual's page, as the Catalogue tab and ``rosette individual`` show it: its best photo per flank, when
and where it was first and last seen, how many sightings and stations, a timeline, a station map, its home range
(minimum convex polygon), and its sex and life stage, which a curator sets (audited; viewers cannot).

Every number says what produced it: times say whether they are the photo's time, the sighting's date or the EXIF
time; stations say whether they are a deployment's location or a sighting's place; the home range says how many
stations and which UTM zone (``db.field.individual_history`` holds the rules)."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import Any

from db.field import individual_history as store
from db.field.individual_history import BEST_PHOTO_RULE, LIFE_STAGES, SEXES, IndividualHistory, SeenAt
from db.session import Catalogue
from jobs.actions.common import attributed, curator_name
from jobs.requests.individuals import IndividualHistoryRequest, SetTraitsRequest

__all__ = ["BEST_PHOTO_RULE", "LIFE_STAGES", "SEXES", "IndividualPage", "TraitsSet", "individual_history",
           "set_individual_traits", "station_map_figure", "timeline_figure"]

STATION_HEADERS = ["Station", "From", "Latitude", "Longitude", "Sightings", "Annotations"]
NO_STATION = "(no station)"


def when_words(seen: SeenAt | None) -> str:
    """``2024-05-01 06:12 (photo time)``; a sighting date given as a day is shown as the day."""
    if seen is None or seen.when is None:
        return "unknown"
    day_only = seen.when_source == store.FROM_SIGHTING and len((seen.when_text or "").strip()) <= 10
    shown = f"{seen.when:%Y-%m-%d}" if day_only else f"{seen.when:%Y-%m-%d %H:%M}"
    return f"{shown} ({seen.when_source})"


@dataclass(frozen=True)
class IndividualPage:
    """One individual's page: the gathered history and its best photos' pictures (absolute paths, captions)."""

    history: IndividualHistory
    best_pictures: list[tuple[str, str]]  # captions "left flank · #12"; the reasons: best_photo_reasons()

    def facts(self) -> str:
        """First and last seen, counts of sightings and stations (plain text; what each comes from is said)."""
        h = self.history
        first, last = h.first_seen, h.last_seen
        photos = f"{h.n_photos} photo{'s' if h.n_photos != 1 else ''}"
        parts = []
        if first is None:
            parts.append("No time known for any of its photos")
        else:
            parts.append(f"First seen {when_words(first)}" + (f" at {first.station}" if first.station else ""))
            parts.append(f"last seen {when_words(last)}" + (f" at {last.station}" if last.station else ""))
        parts.append(f"{h.n_sightings} sighting{'s' if h.n_sightings != 1 else ''} at {h.n_stations} "
                     f"station{'s' if h.n_stations != 1 else ''} ({photos}, {h.n_annotations} "
                     f"annotation{'s' if h.n_annotations != 1 else ''})")
        text = "; ".join(parts) + "."
        if h.n_without_time:
            text += f" {h.n_without_time} annotation{'s have' if h.n_without_time != 1 else ' has'} no readable time."
        if h.n_without_station:
            text += (f" {h.n_without_station} annotation{'s have' if h.n_without_station != 1 else ' has'} "
                     "no deployment and no sighting place.")
        return text

    def best_photo_reasons(self) -> list[str]:
        """Why each flank's photo was chosen (confirmed, mask, crop size, time), one line per flank."""
        return [b.why for b in self.history.best_photos]

    def traits(self) -> str:
        h = self.history
        return f"Sex: {h.sex or 'not recorded'} · life stage: {h.life_stage or 'not recorded'}"

    def home_range(self) -> str:
        return self.history.home_range.words[0].upper() + self.history.home_range.words[1:] + "."

    def station_rows(self) -> list[list[object]]:
        """Rows under :data:`STATION_HEADERS`."""
        return [[s.name, "deployment location" if s.source == store.FROM_DEPLOYMENT else "sighting place",
                 "" if s.lat is None else round(s.lat, 6), "" if s.lon is None else round(s.lon, 6),
                 s.n_sightings, s.n_annotations] for s in self.history.stations]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON (``rosette individual NAME --json``)."""
        h = self.history

        def seen(s: SeenAt | None) -> dict[str, Any] | None:
            if s is None:
                return None
            return {"annotation_id": s.annotation_id, "photo_id": s.photo_id, "flank": s.flank,
                    "time": s.when_text, "local_time": s.when.isoformat() if s.when else None,
                    "time_from": s.when_source, "station": s.station, "sighting": s.sighting}

        hr = h.home_range
        return {"id": h.id, "name": h.name, "active": h.active, "species": h.species, "sex": h.sex,
                "life_stage": h.life_stage, "annotations": h.n_annotations, "photos": h.n_photos,
                "sightings": h.n_sightings, "stations": h.n_stations,
                "first_seen": seen(h.first_seen), "last_seen": seen(h.last_seen),
                "without_time": h.n_without_time, "without_station": h.n_without_station,
                "best_photos": [{"flank": b.flank, "annotation_id": b.annotation_id, "photo_id": b.photo_id,
                                 "confirmed": b.confirmed, "masked": b.masked, "crop_px": b.crop_px,
                                 "time": b.when_text, "chosen_from": b.n_candidates} for b in h.best_photos],
                "best_photo_rule": BEST_PHOTO_RULE,
                "station_list": [{"name": s.name, "key": s.key, "from": s.source, "lat": s.lat, "lon": s.lon,
                                  "sightings": s.n_sightings, "annotations": s.n_annotations} for s in h.stations],
                "home_range": {"mcp_km2": hr.area_km2 if hr.reason is None else None,  # none yet: no 0 to read as one
                               "stations": hr.n_stations, "epsg": hr.epsg, "reason": hr.reason},
                "timeline": [seen(s) for s in h.seen]}


def individual_history(cat: Catalogue, request: IndividualHistoryRequest) -> IndividualPage:
    """One individual's page (see :mod:`db.field.individual_history` for where times and stations come from)."""
    with cat.unit_of_work() as s:
        history = store.individual_history(s, request.individual_id)
    pictures = []
    for b in history.best_photos:
        path = cat.blobs.existing(b.picture)
        if path:
            pictures.append((path, f"{b.flank} flank · #{b.annotation_id}"))
    return IndividualPage(history=history, best_pictures=pictures)


@dataclass(frozen=True)
class TraitsSet:
    name: str
    changed: dict[str, tuple[str | None, str | None]]

    @property
    def message(self) -> str:
        if not self.changed:
            return f"Nothing changed: {self.name} already had that sex and life stage."
        words = {"sex": "sex", "life_stage": "life stage"}
        done = "; ".join(f"{words[k]} {old or 'not recorded'} → {new or 'not recorded'}"
                         for k, (old, new) in self.changed.items())
        return f"{self.name}: {done} (recorded in the audit trail)."


def set_individual_traits(cat: Catalogue, request: SetTraitsRequest) -> TraitsSet:
    """Set an individual's sex and/or life stage; audited under the acting curator, refused to viewers."""
    user = curator_name(request.user)
    with attributed(user), cat.unit_of_work() as s:
        change = store.set_traits(s, request.individual_id, sex=request.sex, life_stage=request.life_stage,
                                  user=user)
        s.commit()
    return TraitsSet(name=change.name, changed=change.changed)


# --------------------------------------------------------------------------- charts

def _shown(text: object) -> str:
    """A user's text (a name, a place) as plotly draws it: its pseudo-HTML is escaped, so it is shown, never read."""
    return html.escape(str(text), quote=False)


FLANK_COLOURS = {"left": "#d97706", "right": "#2563eb", "front": "#16a34a", "other": "#9333ea", "unknown": "#78716c"}


def _empty(fig: Any, text: str) -> Any:
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    fig.add_annotation(text=text, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False, font=dict(size=14))
    return fig


def timeline_figure(page: IndividualPage) -> Any:
    """Plotly scatter: each annotation at its local time (x) and station (y), coloured by flank; hover says where
    the time came from."""
    import plotly.graph_objects as go  # lazy: plotly is only needed once a page is drawn

    h = page.history
    fig = go.Figure()
    fig.update_layout(height=300, margin=dict(l=10, r=10, t=40, b=40), template="plotly_white",
                      title=f"When {_shown(h.name)} was seen (local time; each dot one annotation)",
                      legend=dict(orientation="h", y=-0.25), yaxis=dict(title=None, type="category"))
    timed = h.timed
    if not timed:
        return _empty(fig, "No photo of this individual has a readable time.")
    for flank in store.FLANK_ORDER:
        points = [s for s in timed if s.flank == flank]
        if not points:
            continue
        fig.add_scatter(x=[s.when for s in points], y=[_shown(s.station or NO_STATION) for s in points], mode="markers",
                        name=f"{flank} flank", marker=dict(size=10, color=FLANK_COLOURS[flank]),
                        hovertext=[f"annotation #{s.annotation_id}, photo #{s.photo_id}<br>{_shown(s.when_text)} "
                                   f"({s.when_source})<br>{_shown(s.station or NO_STATION)}"
                                   + (f"<br>sighting {_shown(s.sighting)}" if s.sighting else "") for s in points],
                        hoverinfo="text")
    return fig


def station_map_figure(page: IndividualPage) -> Any:
    """Plotly scatter of the stations' longitude (x) and latitude (y), named, sized by sightings, with the home
    range polygon; plain axes (no map tiles: it works offline), one degree of longitude drawn cos(latitude) as wide
    as one of latitude."""
    import plotly.graph_objects as go  # lazy: plotly is only needed once a page is drawn

    h = page.history
    located = [s for s in h.stations if s.lat is not None and s.lon is not None]
    fig = go.Figure()
    fig.update_layout(height=360, margin=dict(l=10, r=10, t=40, b=40), template="plotly_white", showlegend=False,
                      title=f"Where {_shown(h.name)} was seen ({len(located)} station{'s' if len(located) != 1 else ''} "
                            "with coordinates)",
                      xaxis=dict(title="longitude (°)"), yaxis=dict(title="latitude (°)"))
    if not located:
        return _empty(fig, "No station of this individual has coordinates.")
    hr = h.home_range
    if hr.area_km2 > 0:
        fig.add_scatter(x=[*hr.hull_lons, hr.hull_lons[0]], y=[*hr.hull_lats, hr.hull_lats[0]], mode="lines",
                        fill="toself", fillcolor="rgba(217,119,6,0.12)", line=dict(color="#d97706", dash="dot"),
                        hoverinfo="text", hovertext=f"minimum convex polygon: {hr.area_km2:.2f} km²")
    fig.add_scatter(x=[s.lon for s in located], y=[s.lat for s in located], mode="markers+text",
                    text=[_shown(s.name) for s in located], textposition="top center",
                    marker=dict(size=[8 + 4 * math.sqrt(max(s.n_sightings, 1)) for s in located], color="#2563eb"),
                    hovertext=[f"{_shown(s.name)}<br>{s.lat:.5f}, {s.lon:.5f}<br>{s.n_sightings} sighting"
                               f"{'s' if s.n_sightings != 1 else ''}, {s.n_annotations} annotation"
                               f"{'s' if s.n_annotations != 1 else ''}" for s in located], hoverinfo="text")
    mid_lat = sum(s.lat for s in located) / len(located)
    lats, lons = [s.lat for s in located], [s.lon for s in located]
    pad_lat = max((max(lats) - min(lats)) * 0.2, 0.005)  # room for the names above the points
    pad_lon = max((max(lons) - min(lons)) * 0.2, 0.005)
    fig.update_yaxes(range=[min(lats) - pad_lat, max(lats) + pad_lat])
    fig.update_xaxes(range=[min(lons) - pad_lon, max(lons) + pad_lon], scaleanchor="y",
                     scaleratio=max(math.cos(math.radians(mid_lat)), 0.05))
    return fig

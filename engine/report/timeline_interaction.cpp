#include "engine/report/timeline_interaction.h"
#include "engine/core/bounded_json.h"

#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/report/html_page.h"

namespace ferry {
namespace {

std::string op_legend(const MemoryProfile& profile) {
  std::set<std::string> kinds;
  for (const OpMarker& op : profile.ops) {
    if (op.kind != "copy" && op.kind != "communication" && op.depth <= 1) kinds.insert(op.kind);
  }
  if (kinds.empty()) return "";
  std::string legend = "<div class=\"legend\">lanes: ";
  for (const std::string& kind : kinds) {
    legend += "<span><i style=\"background:" + std::string(kind == "step" ? "#d9d9d9" : op_kind_color(kind)) + "\"></i>" + html::escape(kind) + "</span>";
  }
  return legend + "</div>";
}

// {categories, tags, initial: [[address, size, category, tag]], events: [[t, 0 alloc | 1 free, address,
// size, category, tag]], ops: [[kind, name, start, end, depth]]}; times in ns from the profile's start.
std::string click_data(const MemoryProfile& profile) {
  nlohmann::json categories = nlohmann::json::array();
  for (MemoryCategory category : kAllMemoryCategories) categories.push_back(std::string(category_name(category)));
  nlohmann::json tags = nlohmann::json::array({""});
  std::map<std::string, std::size_t> tag_index{{"", 0}};
  const auto tag_of = [&](const std::string& tag) {
    const auto [it, added] = tag_index.try_emplace(tag, tag_index.size());
    if (added) tags.push_back(tag);
    return it->second;
  };
  nlohmann::json initial = nlohmann::json::array();
  for (const LiveAllocation& each : profile.initial_allocations) {
    initial.push_back({each.address, each.size, category_index(each.category), tag_of(each.tag)});
  }
  nlohmann::json events = nlohmann::json::array();
  for (const TraceEvent& event : profile.events) {
    if (event.action != TraceAction::alloc && event.action != TraceAction::free_requested) continue;
    const auto tag = profile.tags.find(event.tag);
    events.push_back({event.time_ns - profile.start_ns, event.action == TraceAction::alloc ? 0 : 1, event.address, event.size,
                      category_index(event.category), tag_of(tag == profile.tags.end() ? "" : tag->second)});
  }
  nlohmann::json ops = nlohmann::json::array();
  for (const OpMarker& op : profile.ops) {
    if (op.kind == "copy") continue;
    ops.push_back({op.kind, op.name, op.start_ns - profile.start_ns, (op.end_ns == 0 ? profile.end_ns : op.end_ns) - profile.start_ns, op.depth});
  }
  std::string text = json_text(nlohmann::json{{"categories", categories}, {"tags", tags}, {"initial", initial}, {"events", events}, {"ops", ops}});
  for (std::size_t at = text.find("</"); at != std::string::npos; at = text.find("</", at + 3)) text.replace(at, 2, "<\\/");
  return text;
}

}  // namespace

std::string timeline_figure(const MemoryProfile& profile, const MemoryTimeline& timeline, const TimelineAxes& axes, std::string_view id) {
  const std::string name(id);
  std::string figure = op_legend(profile) + "\n" + timeline_svg(profile, timeline, axes, id);
  figure += "<p class=\"meta\">Scroll on the timeline to zoom, drag to pan, double-click to see it whole; click a moment to see what was live.</p>\n";
  if (profile.events.size() <= kMaxClickableEvents) {
    figure += "<script type=\"application/json\" id=\"" + name + "-data\">" + click_data(profile) + "</script>\n";
    figure += "<div class=\"moment\" id=\"" + name + "-moment\"></div>\n";
  } else {
    figure += "<p class=\"meta\">" + std::to_string(profile.events.size()) +
              " allocator events are too many to list what was live on a click; open trace.json in ui.perfetto.dev.</p>\n";
  }
  return figure;
}

std::string_view timeline_script() {
  return R"(<style>.moment{background:#f6f8fa;border-left:4px solid #888;padding:6px 12px;margin:8px 0;font-size:13px}
.moment:empty{display:none}.moment table{margin:4px 0}.moment td{white-space:nowrap}.moment td.tag{white-space:normal}svg.timeline{cursor:crosshair;user-select:none}</style>
<script>
(function () {
  function bytes(n) { var u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'], i = 0; while (n >= 1024 && i < 4) { n /= 1024; i++; } return (i ? n.toFixed(2) : n) + ' ' + u[i]; }
  function ms(ns) { return (ns / 1e6).toPrecision(6).replace(/\.?0+$/, '') + ' ms'; }
  function esc(s) { return String(s).replace(/[&<>"]/g, function (c) { return {'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;'}[c]; }); }
  function step(span) { var m = Math.pow(10, Math.floor(Math.log10(span))); return [1, 2, 2.5, 5, 10].map(function (k) { return k * m; }).find(function (s) { return span / s <= 8; }); }
  document.querySelectorAll('svg.timeline').forEach(function (svg) {
    var L = +svg.dataset.left, W = +svg.dataset.width, D = +svg.dataset.duration, bottom = +svg.dataset.plotBottom;
    var zooms = svg.querySelectorAll('g.zoom'), axis = svg.querySelector('g.time-axis'), cursor = svg.querySelector('line.cursor');
    var dataNode = document.getElementById(svg.id + '-data'), panel = document.getElementById(svg.id + '-moment');
    var data = dataNode ? JSON.parse(dataNode.textContent) : null;
    var view = {t0: 0, t1: D}, picked = null;
    function X(t) { return L + W * (t - view.t0) / (view.t1 - view.t0); }
    function T(x) { return view.t0 + (x - L) / W * (view.t1 - view.t0); }
    function svgX(e) { var p = svg.createSVGPoint(); p.x = e.clientX; p.y = e.clientY; return p.matrixTransform(svg.getScreenCTM().inverse()).x; }
    function draw() {
      var k = D / (view.t1 - view.t0);
      zooms.forEach(function (g) { g.setAttribute('transform', 'translate(' + (L - (L + W * view.t0 / D) * k) + ',0) scale(' + k + ',1)'); });
      svg.querySelectorAll('[data-t]').forEach(function (el) {
        var x = X(+el.dataset.t);
        if (el.dataset.tEnd !== undefined) {
          var x1 = Math.min(X(+el.dataset.tEnd), L + W), x0 = Math.max(x, L);
          el.style.display = x1 - x0 > 40 ? '' : 'none';
          el.setAttribute('x', x0 + 3);
        } else {
          el.style.display = x < L || x > L + W ? 'none' : '';
          el.setAttribute(el.tagName === 'circle' ? 'cx' : 'x', x);
        }
      });
      var s = step((view.t1 - view.t0) / 1e6) * 1e6, html = '';
      for (var t = Math.ceil(view.t0 / s) * s; t <= view.t1 * 1.0001; t += s) {
        html += '<text x="' + X(t).toFixed(1) + '" y="' + (bottom + 15) + '" text-anchor="middle">' + ms(t) + '</text>';
      }
      axis.innerHTML = html;
      if (picked !== null) { var cx = X(picked); cursor.setAttribute('x1', cx); cursor.setAttribute('x2', cx); cursor.style.display = cx < L || cx > L + W ? 'none' : ''; }
    }
    function show(t) {
      if (!data) return;
      picked = t;
      var live = new Map();
      data.initial.forEach(function (a) { live.set(a[0], a); });
      for (var i = 0; i < data.events.length && data.events[i][0] <= t; i++) {
        var e = data.events[i];
        if (e[1] === 0) live.set(e[2], [e[2], e[3], e[4], e[5]]); else live.delete(e[2]);
      }
      var groups = {}, total = 0;
      live.forEach(function (a) {
        var g = groups[a[2]] = groups[a[2]] || {bytes: 0, count: 0, tags: {}};
        g.bytes += a[1]; g.count++; total += a[1];
        var tag = data.tags[a[3]] || '(no tag)'; g.tags[tag] = (g.tags[tag] || 0) + a[1];
      });
      var ops = data.ops.filter(function (o) { return o[2] <= t && t <= o[3]; }).sort(function (a, b) { return a[4] - b[4]; });
      var html = '<b>At ' + ms(t) + '</b>' + (ops.length ? ', during ' + ops.map(function (o) { return esc(o[0] === 'step' ? o[1] : o[0] + ' ' + o[1]); }).join(' &gt; ') : '') +
                 ': <b>' + bytes(total) + '</b> allocated in ' + live.size + ' blocks.<table><tr><th>category</th><th>bytes</th><th>blocks</th><th>largest tags</th></tr>';
      Object.keys(groups).sort(function (a, b) { return groups[b].bytes - groups[a].bytes; }).forEach(function (c) {
        var g = groups[c], tags = Object.keys(g.tags).sort(function (a, b) { return g.tags[b] - g.tags[a]; });
        html += '<tr><td>' + esc(data.categories[c]) + '</td><td>' + bytes(g.bytes) + '</td><td>' + g.count + '</td><td class="tag">' +
                tags.slice(0, 5).map(function (k) { return esc(k) + ' ' + bytes(g.tags[k]); }).join(', ') + (tags.length > 5 ? ', ...' : '') + '</td></tr>';
      });
      panel.innerHTML = html + '</table>';
      panel.dataset.bytes = total; panel.dataset.blocks = live.size;
      draw();
    }
    svg.addEventListener('wheel', function (e) {
      e.preventDefault();
      var t = T(svgX(e)), f = e.deltaY < 0 ? 0.8 : 1.25, span = Math.min(D, Math.max((view.t1 - view.t0) * f, D * 1e-6, 1000));
      var t0 = Math.max(0, Math.min(D - span, t - (t - view.t0) * span / (view.t1 - view.t0)));
      view = {t0: t0, t1: t0 + span}; draw();
    }, {passive: false});
    var drag = null;
    svg.addEventListener('mousedown', function (e) { drag = {x: svgX(e), view: view, moved: false}; });
    window.addEventListener('mousemove', function (e) {
      if (!drag) return;
      var dx = svgX(e) - drag.x; if (Math.abs(dx) > 3) drag.moved = true;
      var span = drag.view.t1 - drag.view.t0, t0 = Math.max(0, Math.min(D - span, drag.view.t0 - dx / W * span));
      view = {t0: t0, t1: t0 + span}; draw();
    });
    window.addEventListener('mouseup', function (e) {
      if (drag && !drag.moved && e.target.closest && e.target.closest('svg') === svg) show(Math.max(0, Math.min(D, T(svgX(e)))));
      drag = null;
    });
    svg.addEventListener('dblclick', function () { view = {t0: 0, t1: D}; draw(); });
    // A link can open a view and a moment: report.html#view=T0,T1&t=T (nanoseconds from the start).
    var link = {};
    location.hash.slice(1).split('&').forEach(function (pair) { var kv = pair.split('='); if (kv[1]) link[kv[0]] = kv[1]; });
    if (link.view) { var v = link.view.split(',').map(Number); if (v[1] > v[0]) view = {t0: Math.max(0, v[0]), t1: Math.min(D, v[1])}; }
    draw();
    if (link.t) show(+link.t);
  });
})();
</script>
)";
}

}  // namespace ferry

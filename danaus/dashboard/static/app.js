// The danaus dashboard's page: plain JavaScript, no build step, no library, nothing fetched
// from elsewhere. It listens to the server's event stream (/api/events) and draws the job:
// topology, failures, logs; stacks, flame graphs, the trace timeline and reports on demand.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const SVG = "http://www.w3.org/2000/svg";

  /** An element: el("div", {class: "x", text: "hi", data: {proc: "root"}}, child...). */
  function el(tag, attrs = {}, ...children) {
    const node = tag.startsWith("svg:")
      ? document.createElementNS(SVG, tag.slice(4))
      : document.createElement(tag);
    for (const [key, value] of Object.entries(attrs)) {
      if (value === undefined || value === null || value === false) continue;
      if (key === "text") node.textContent = value;
      else if (key === "data") Object.assign(node.dataset, value);
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? "" : value);
    }
    for (const child of children) {
      if (child !== null && child !== undefined && child !== false) node.append(child);
    }
    return node;
  }

  const page = {
    source: null, // what is shown: {kind, title, details, stacks}
    state: null, // the latest PageState
    logs: [], // every line kept, oldest first
    selected: null, // {kind: "proc" | "actor", id}
    flashing: null, // "proc:ID", "actor:ID" or "failure:KEY": drawn with attention for a moment
    sim: null, // the simulator's cursor, on a simulation
    trace: null, // the loaded trace: {tracks, slices, flows, instants, t0, t1}
  };
  const MAX_LOGS = 5000;
  const SHOWN_LOGS = 2000;

  // ---- formatting ---------------------------------------------------------------------

  const fmt = {
    rate: (r) => (r >= 100 ? r.toFixed(0) : r >= 10 ? r.toFixed(1) : r.toFixed(2).replace(/\.?0+$/, "") || "0"),
    coords: (coords, rank) => {
      const parts = Object.entries(coords || {}).map(([k, v]) => `${k}=${v}`);
      return parts.length ? parts.join(" ") : `rank ${rank}`;
    },
    states: (states) => Object.entries(states).sort().map(([s, n]) => `${s} ${n}`).join(", "),
    bytes: (n) => (n >= 1 << 20 ? `${(n / (1 << 20)).toFixed(1)} MiB` : n >= 1024 ? `${(n / 1024).toFixed(1)} KiB` : `${n} B`),
    time: (at) => {
      if (page.source && page.source.kind === "simulation") return `${at.toFixed(6)}s`;
      const d = new Date(at * 1000);
      return d.toTimeString().slice(0, 8) + "." + String(d.getMilliseconds()).padStart(3, "0");
    },
    age: (s) => (s < 60 ? `${s.toFixed(0)} s ago` : s < 3600 ? `${(s / 60).toFixed(0)} min ago` : `${(s / 3600).toFixed(1)} h ago`),
  };

  function hue(text) {
    let h = 0;
    for (let i = 0; i < text.length; i++) h = (h * 31 + text.charCodeAt(i)) >>> 0;
    return h;
  }

  async function getJSON(url, options) {
    const response = await fetch(url, options);
    const body = await response.json().catch(() => ({ error: `${response.status} ${response.statusText}` }));
    if (!response.ok) throw new Error(body.error || response.statusText);
    return body;
  }

  function notice(text, bad) {
    const box = $("notice");
    box.hidden = !text;
    box.textContent = text || "";
    box.classList.toggle("bad", !!bad);
  }

  // ---- live updates -------------------------------------------------------------------

  function setLive(on, text) {
    const live = $("live");
    live.classList.toggle("on", on);
    live.classList.toggle("off", !on);
    $("live-text").textContent = text || (on ? "live" : "disconnected");
  }

  let events = null;

  /**
   * Listen to the server while the page is seen, and stop while it is hidden (another tab, a
   * minimised window): with no page listening, the server asks the job nothing.
   */
  function follow() {
    if (document.hidden && events) {
      events.close();
      events = null;
      setLive(false, "paused while hidden");
    } else if (!document.hidden && !events) {
      connect();
    }
  }

  function connect() {
    events = new EventSource("/api/events");
    events.addEventListener("hello", (e) => {
      const hello = JSON.parse(e.data);
      page.source = hello.source;
      page.logs = [];
      renderLogs(true);
      renderSource();
      setLive(true);
    });
    events.addEventListener("state", (e) => {
      page.state = JSON.parse(e.data);
      notice("");
      setLive(true, `live · ${new Date().toTimeString().slice(0, 8)}`);
      render();
    });
    events.addEventListener("logs", (e) => addLogs(JSON.parse(e.data)));
    events.addEventListener("sim", (e) => renderSim(JSON.parse(e.data)));
    events.addEventListener("status", (e) => {
      notice(JSON.parse(e.data).error, true);
      setLive(false, "not answering");
    });
    events.addEventListener("reset", () => {
      page.logs = [];
      renderLogs(true);
    });
    events.onerror = () => setLive(false, "reconnecting…");
  }

  // ---- header -------------------------------------------------------------------------

  function renderSource() {
    const source = page.source;
    $("title").textContent = source.title;
    $("subtitle").textContent = Object.entries(source.details).map(([k, v]) => `${k}: ${v}`).join(" · ");
    document.title = `danaus · ${source.title}`;
    $("sim").hidden = source.kind !== "simulation";
    $("stack-take").disabled = !source.stacks;
    $("profile-take").disabled = !source.stacks;
  }

  function badge(label, value, kind) {
    return el("span", { class: `badge ${kind || ""}` }, label, el("b", { text: String(value) }));
  }

  function renderBadges() {
    const t = page.state.totals;
    const badges = [
      badge("hosts", t.hosts),
      badge("procs", t.procs),
      badge("actors", t.actors),
      badge("msg/s", fmt.rate(t.rate)),
      badge("failures", t.failures, t.failures ? "bad" : ""),
      t.not_answering ? badge("not answering", t.not_answering, "warn") : null,
      page.source && page.source.kind === "job" ? badge("gathered in", `${page.state.gather_ms} ms`) : null,
    ];
    draw($("badges"), ...badges);
    const count = $("failure-count");
    count.textContent = t.failures || "";
    count.classList.toggle("bad", t.failures > 0);
  }

  function render() {
    renderBadges();
    renderTopology();
    renderDetails();
    renderFailures();
    renderProcChoice();
  }

  // ---- drawing in place ---------------------------------------------------------------

  /**
   * Make ``old`` (in the page) look like ``fresh`` (built aside), changing only what differs.
   * A page refreshed every second then re-lays out and repaints only what changed, which keeps
   * an open dashboard cheap for the browser (and for the machine the job shares with it).
   * Handlers are never copied: the page's handlers are delegated, keyed by data attributes.
   */
  function morph(old, fresh) {
    if (old.nodeType !== fresh.nodeType || old.nodeName !== fresh.nodeName) {
      old.replaceWith(fresh);
      return;
    }
    if (old.nodeType !== Node.ELEMENT_NODE) {
      if (old.nodeValue !== fresh.nodeValue) old.nodeValue = fresh.nodeValue;
      return;
    }
    for (const { name } of [...old.attributes]) if (!fresh.hasAttribute(name)) old.removeAttribute(name);
    for (const { name, value } of fresh.attributes) if (old.getAttribute(name) !== value) old.setAttribute(name, value);
    const before = [...old.childNodes];
    const after = [...fresh.childNodes];
    after.forEach((child, i) => (i < before.length ? morph(before[i], child) : old.append(child)));
    for (const child of before.slice(after.length)) child.remove();
  }

  /** Replace ``box``'s children by ``children``, in place (see `morph`). */
  function draw(box, ...children) {
    const fresh = box.cloneNode(false);
    fresh.append(...children.filter(Boolean));
    morph(box, fresh);
  }

  // ---- topology -----------------------------------------------------------------------

  function isSelected(kind, id) {
    return page.selected && page.selected.kind === kind && page.selected.id === id;
  }

  function marks(kind, id) {
    return `${isSelected(kind, id) ? " selected" : ""}${page.flashing === `${kind}:${id}` ? " flash" : ""}`;
  }

  function procCell(proc) {
    const live = proc.state === "running";
    const label = live ? `${proc.cpu_percent.toFixed(0)}% cpu` : proc.state;
    const tip = `proc ${proc.id} · ${proc.state}` + (proc.pid ? ` · pid ${proc.pid}` : "") +
      (live ? ` · ${proc.cpu_percent}% CPU · ${proc.rss_mib} MiB · ✉ ${proc.mailbox} · ${fmt.rate(proc.rate)} msg/s` : "");
    return el(
      "button",
      { type: "button", class: `cell proc state-${proc.state}${marks("proc", proc.id)}`, title: tip, data: { proc: proc.id, state: proc.state, kind: "proc" } },
      el("span", { class: "n", text: String(proc.index) }),
      el("span", { class: "m", text: label }),
    );
  }

  /** States in which an actor takes messages: its mailbox and rate mean something. */
  const ACTIVE = new Set(["starting", "running", "stopping"]);

  function actorCell(actor) {
    const tip = `${actor.actor} on ${actor.proc} · ${actor.state} · mailbox ${actor.mailbox} · ${fmt.rate(actor.rate)} msg/s` +
      (actor.running ? ` · running ${actor.running}` : "");
    return el(
      "button",
      {
        type: "button",
        class: `cell actor state-${actor.state}${actor.running ? " busy" : ""}${marks("actor", actor.actor)}`,
        title: tip,
        data: { actor: actor.actor, proc: actor.proc, state: actor.state, kind: "actor" },
      },
      el("span", { class: "c", text: fmt.coords(actor.coords, actor.rank) }),
      ACTIVE.has(actor.state)
        ? el("span", { class: "m" }, el("span", { text: `✉ ${actor.mailbox}` }), el("span", { text: `${fmt.rate(actor.rate)}/s` }))
        : null,
      el("span", { class: "r", text: actor.running ? `▶ ${actor.running}` : actor.state }),
    );
  }

  function stateList(states) {
    return el(
      "span",
      { class: "states" },
      ...Object.entries(states).sort().map(([s, n]) => el("span", {}, el("i", { class: `state-${s}` }), `${s} ${n}`)),
    );
  }

  /** An actor mesh's members laid out by their coordinates: the last dimension across. */
  function meshGrid(mesh) {
    const dims = mesh.dims;
    if (dims.length < 2) return el("div", { class: "cells" }, ...mesh.members.map(actorCell));
    const across = dims[dims.length - 1];
    const rows = new Map();
    let width = 0;
    for (const member of mesh.members) {
      const key = dims.slice(0, -1).map((d) => `${d}=${member.coords[d]}`).join(" ");
      if (!rows.has(key)) rows.set(key, []);
      rows.get(key).push(member);
      width = Math.max(width, (member.coords[across] ?? 0) + 1);
    }
    const grid = el("div", { class: "grid" });
    grid.style.gridTemplateColumns = `auto repeat(${width}, minmax(92px, max-content))`;
    let row = 1;
    for (const [key, members] of rows) {
      const label = el("span", { class: "rowlabel", text: key });
      label.style.gridRow = String(row);
      label.style.gridColumn = "1";
      grid.append(label);
      for (const member of members) {
        const cell = actorCell(member);
        cell.style.gridRow = String(row);
        cell.style.gridColumn = String((member.coords[across] ?? 0) + 2);
        grid.append(cell);
      }
      row++;
    }
    return grid;
  }

  function renderTopology() {
    const state = page.state;
    const parts = [];
    if (state.sessions.length) {
      parts.push(
        el(
          "div",
          { class: "sessions" },
          el("b", { text: `${state.sessions.length} rank(s) stopped at breakpoint()` }),
          " — attach with ",
          el("code", { text: "danaus debug" }),
          ": ",
          state.sessions.map((s) => `${s.mesh} ${fmt.coords(s.coords, s.rank)} at ${s.location}`).join("; "),
        ),
      );
    }
    for (const host of state.hosts) {
      const count = Object.values(host.states).reduce((a, b) => a + b, 0);
      const section = el(
        "section",
        { class: "host", data: { host: host.host } },
        el(
          "h2",
          {},
          el("span", { class: "name", text: `host ${host.host}` }),
          el("span", { class: "facts", text: `${count} procs · CPU ${host.cpu_percent.toFixed(0)}% · RSS ${host.rss_mib.toFixed(0)} MiB` }),
          stateList(host.states),
        ),
      );
      for (const mesh of host.proc_meshes) {
        const states = {};
        for (const p of mesh.procs) states[p.state] = (states[p.state] || 0) + 1;
        const block = el(
          "div",
          { class: "procmesh", data: { mesh: mesh.id } },
          el(
            "div",
            { class: "pm-head" },
            el("span", { class: "kind", text: mesh.procs.length === 1 && mesh.id === "root" ? "controller" : "proc mesh" }),
            el("span", { class: "id", text: mesh.id }),
            el("span", { class: "dim", text: `${mesh.procs.length} proc${mesh.procs.length === 1 ? "" : "s"}` }),
            stateList(states),
          ),
          el("div", { class: "cells" }, ...mesh.procs.map(procCell)),
        );
        for (const actors of mesh.actor_meshes) {
          block.append(
            el(
              "div",
              { class: "actormesh", data: { actorMesh: actors.id } },
              el(
                "div",
                { class: "am-head" },
                el("span", { class: "kind", text: "actor mesh" }),
                el("span", { class: "name", text: actors.name }),
                el("span", { class: "class", text: actors.class_name }),
                el("span", { class: "dim", text: actors.id }),
                stateList(actors.states),
              ),
              meshGrid(actors),
            ),
          );
        }
        section.append(block);
      }
      parts.push(section);
    }
    if (!parts.length) parts.push(el("p", { class: "empty", text: "No procs." }));
    draw($("topology"), ...parts);
  }

  function allProcs() {
    const found = [];
    for (const host of page.state ? page.state.hosts : []) {
      for (const mesh of host.proc_meshes) for (const proc of mesh.procs) found.push({ ...proc, host: host.host });
    }
    return found;
  }

  function allActors() {
    const found = [];
    for (const host of page.state ? page.state.hosts : []) {
      for (const mesh of host.proc_meshes) {
        for (const actors of mesh.actor_meshes) {
          for (const member of actors.members) found.push({ ...member, mesh: actors.name, mesh_id: actors.id, class_name: actors.class_name });
        }
      }
    }
    return found;
  }

  function failureByKey(key) {
    return page.state ? page.state.failures.find((f) => f.key === key) : undefined;
  }

  function select(kind, id) {
    page.selected = { kind, id };
    renderTopology();
    renderDetails();
  }

  /** Draw attention to a cell or a card for a moment (it survives the refreshes meanwhile). */
  function flash(mark, redraw) {
    page.flashing = mark;
    redraw();
    setTimeout(() => {
      if (page.flashing !== mark) return;
      page.flashing = null;
      redraw();
    }, 2600);
  }

  $("topology").addEventListener("click", (e) => {
    const cell = e.target.closest(".cell");
    if (!cell) return;
    if (cell.dataset.kind === "proc") select("proc", cell.dataset.proc);
    else select("actor", cell.dataset.actor);
  });

  // ---- what the page's links and buttons do, by their data-action -----------------------

  const ACTIONS = {
    "select-proc": (data) => select("proc", data.proc),
    "select-actor": (data) => select("actor", data.actor),
    stacks: (data) => openStacks(data.proc),
    flame: (data) => openStacks(data.proc, true),
    "logs-proc": (data) => openLogs({ proc: data.proc }),
    "logs-rank": (data) => openLogs({ mesh: data.mesh, coords: data.coords }),
    "open-failure": (data) => showFailure(data.key),
    "show-in-topology": (data) => showInTopology(failureByKey(data.key)),
  };

  for (const box of ["details", "failures"]) {
    $(box).addEventListener("click", (e) => {
      const target = e.target.closest("[data-action]");
      if (target) ACTIONS[target.dataset.action](target.dataset);
    });
  }

  function action(tag, name, text, data) {
    return el(tag, { type: tag === "button" ? "button" : undefined, text, data: { action: name, ...data } });
  }

  function facts(pairs) {
    return el("dl", {}, ...pairs.filter(([, v]) => v !== undefined && v !== null && v !== "").flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { text: String(v) })]));
  }

  /** The failures linked to ``failure``: a lost proc's actors, or a failed actor's lost proc. */
  function related(failure) {
    const all = page.state.failures;
    if (failure.kind === "proc") return all.filter((f) => f.kind === "actor" && f.proc === failure.proc);
    return all.filter((f) => f.kind === "proc" && f.proc === failure.proc);
  }

  function failureName(f) {
    return f.kind === "proc" ? `proc ${f.proc}` : `${f.mesh} ${fmt.coords(f.coords, f.rank)}`;
  }

  /** Links to the related failures: in the topology (``where`` "topology") or in Failures. */
  function relatedLine(failure, where) {
    const links = related(failure);
    if (!links.length) return null;
    const lead = failure.kind === "proc" ? "its actors failed with it:" : "its proc was lost:";
    const link = (f) =>
      where === "topology"
        ? action("a", f.kind === "proc" ? "select-proc" : "select-actor", failureName(f), { proc: f.proc, actor: f.what })
        : action("a", "open-failure", failureName(f), { key: f.key });
    return el("div", { class: "related" }, el("span", { text: `${lead} ` }), ...links.map(link));
  }

  function failureBlock(key) {
    const failure = failureByKey(key);
    if (!failure) return null;
    return el(
      "div",
      { class: "failure-report" },
      el("div", { class: "dim", text: `failed ${fmt.age(failure.age_s)}: ${failure.cause}` }),
      relatedLine(failure, "topology"),
      failure.report !== failure.cause ? el("pre", { text: failure.report }) : null,
      action("button", "open-failure", "Open in Failures", { key }),
    );
  }

  function renderDetails() {
    const box = $("details");
    const chosen = page.selected;
    if (!chosen || !page.state) return;
    const canStack = page.source && page.source.stacks;
    if (chosen.kind === "proc") {
      const proc = allProcs().find((p) => p.id === chosen.id);
      if (!proc) {
        draw(box, el("p", { class: "empty", text: `proc ${chosen.id} is no longer shown` }));
        return;
      }
      const here = allActors().filter((a) => a.proc === proc.id);
      const running = proc.state === "running";
      const stacks = action("button", "stacks", "Stacks", { proc: proc.id });
      stacks.id = "details-stacks";
      draw(
        box,
        el("h3", { text: `proc ${proc.id}` }),
        el("span", { class: `state state-${proc.state}`, text: proc.state }),
        facts([
          ["host", proc.host],
          ["pid", proc.pid],
          ["CPU", running ? `${proc.cpu_percent}%` : ""],
          ["RSS", running ? `${proc.rss_mib} MiB` : ""],
          ["threads", proc.threads || ""],
          ["actors", here.map((a) => `${a.mesh} ${fmt.coords(a.coords, a.rank)}`).join(", ") || "none"],
          ["mailbox", running ? proc.mailbox : ""],
          ["msg/s", running ? fmt.rate(proc.rate) : ""],
        ]),
        el(
          "div",
          { class: "actions" },
          canStack && (running || proc.state === "lost") ? stacks : null,
          canStack && running ? action("button", "flame", "Flame graph", { proc: proc.id }) : null,
          action("button", "logs-proc", "Logs", { proc: proc.id }),
        ),
        proc.failure ? failureBlock(proc.failure) : null,
      );
      return;
    }
    const actor = allActors().find((a) => a.actor === chosen.id);
    if (!actor) {
      draw(box, el("p", { class: "empty", text: `actor ${chosen.id} is no longer shown` }));
      return;
    }
    const coords = Object.entries(actor.coords).map(([k, v]) => `${k}=${v}`).join(" ");
    draw(
      box,
      el("h3", { text: actor.actor }),
      el("span", { class: `state state-${actor.state}`, text: actor.state }),
      facts([
        ["mesh", `${actor.mesh} (${actor.mesh_id})`],
        ["class", actor.class_name],
        ["coordinates", fmt.coords(actor.coords, actor.rank)],
        ["proc", actor.proc],
        ["mailbox", ACTIVE.has(actor.state) ? actor.mailbox : ""],
        ["msg/s", ACTIVE.has(actor.state) ? fmt.rate(actor.rate) : ""],
        ["running", actor.running],
      ]),
      el(
        "div",
        { class: "actions" },
        action("button", "select-proc", `Proc ${actor.proc}`, { proc: actor.proc }),
        canStack && actor.state !== "failed" ? action("button", "stacks", "Stacks of its proc", { proc: actor.proc }) : null,
        action("button", "logs-rank", "Logs of this rank", { mesh: actor.mesh, coords }),
      ),
      actor.failure ? failureBlock(actor.failure) : null,
    );
  }

  // ---- failures -----------------------------------------------------------------------

  function renderFailures() {
    const failures = page.state.failures;
    const box = $("failures");
    if (!failures.length) {
      draw(box, el("p", { class: "empty", text: "No failures so far." }));
      return;
    }
    const open = new Set([...box.querySelectorAll("details[open]")].map((d) => d.dataset.key));
    draw(
      box,
      ...failures.map((f, i) => {
        const where = f.kind === "proc" ? "" : `${f.mesh} ${fmt.coords(f.coords, f.rank)} on ${f.proc}`;
        const report = el(
          "details",
          { data: { key: f.key }, open: open.has(f.key) || (open.size === 0 && i < 3) || page.flashing === `failure:${f.key}` },
          el("summary", { text: "whole report" }),
          el("pre", { text: f.report }),
        );
        return el(
          "article",
          { class: `failure${page.flashing === `failure:${f.key}` ? " flash" : ""}`, data: { key: f.key } },
          el(
            "header",
            {},
            el("span", { class: "kind", text: f.kind === "proc" ? "proc lost" : "actor failed" }),
            el("span", { class: "what", text: f.what }),
            el("span", { class: "where", text: where }),
            el("span", { class: "dim", text: fmt.age(f.age_s) }),
            action("a", "show-in-topology", "show in topology →", { key: f.key }),
          ),
          el("div", { class: "cause", text: f.cause }),
          relatedLine(f, "failures"),
          report,
        );
      }),
    );
  }

  function showFailure(key) {
    activate("failures");
    flash(`failure:${key}`, renderFailures);
    const card = document.querySelector(`#failures .failure[data-key="${CSS.escape(key)}"]`);
    if (card) card.scrollIntoView({ block: "center" });
  }

  function showInTopology(failure) {
    if (!failure) return;
    activate("topology");
    const actor = failure.kind === "actor";
    select(actor ? "actor" : "proc", actor ? failure.what : failure.proc);
    flash(actor ? `actor:${failure.what}` : `proc:${failure.proc}`, renderTopology);
    const cell = document.querySelector("#topology .cell.selected");
    if (cell) cell.scrollIntoView({ block: "center" });
  }

  // ---- logs ---------------------------------------------------------------------------

  function logFilter() {
    const coords = {};
    for (const part of $("log-coords").value.split(/[\s,]+/)) {
      const [k, v] = part.split("=");
      if (k && v !== undefined && v !== "") coords[k] = Number(v);
    }
    return {
      mesh: $("log-mesh").value,
      coords,
      proc: $("log-proc").value.trim(),
      text: $("log-text").value.trim().toLowerCase(),
      stream: $("log-stream").value,
    };
  }

  function logMatches(line, filter) {
    if (filter.mesh && line.mesh !== filter.mesh) return false;
    for (const [k, v] of Object.entries(filter.coords)) if (line.coords[k] !== v) return false;
    if (filter.proc && line.proc !== filter.proc) return false;
    if (filter.stream && String(line.stream) !== filter.stream) return false;
    if (filter.text && !line.text.toLowerCase().includes(filter.text)) return false;
    return true;
  }

  function logLine(line) {
    const who = line.proc ? `proc ${line.proc}` : [line.host, line.mesh, Object.entries(line.coords).map(([k, v]) => `${k}=${v}`).join(" ")].filter(Boolean).join(" ");
    return el(
      "div",
      { class: `line${line.stream === 2 ? " err" : ""}`, data: { seq: line.seq } },
      el("span", { class: "t", text: fmt.time(line.at) }),
      el("span", { class: "who", text: who || "—", title: who }),
      el("span", { class: "x" }, line.count > 1 ? el("span", { class: "cnt", text: `×${line.count} ` }) : null, line.text),
    );
  }

  function updateMeshChoice() {
    const choice = $("log-mesh");
    const known = new Set([...choice.options].map((o) => o.value));
    for (const line of page.logs) {
      if (line.mesh && !known.has(line.mesh)) {
        known.add(line.mesh);
        choice.append(el("option", { value: line.mesh, text: line.mesh }));
      }
    }
  }

  function addLogs(lines) {
    page.logs.push(...lines);
    if (page.logs.length > MAX_LOGS) page.logs.splice(0, page.logs.length - MAX_LOGS);
    updateMeshChoice();
    const filter = logFilter();
    const box = $("logs");
    const fresh = lines.filter((l) => logMatches(l, filter)).map(logLine);
    box.append(...fresh);
    while (box.childElementCount > SHOWN_LOGS) box.firstElementChild.remove();
    finishLogs();
  }

  function renderLogs() {
    const filter = logFilter();
    const shown = page.logs.filter((l) => logMatches(l, filter)).slice(-SHOWN_LOGS);
    $("logs").replaceChildren(...shown.map(logLine));
    finishLogs();
  }

  function finishLogs() {
    const box = $("logs");
    $("log-count").textContent = page.logs.length || "";
    $("log-shown").textContent = `${box.childElementCount} of ${page.logs.length} lines`;
    if ($("log-follow").checked) box.scrollTop = box.scrollHeight;
  }

  for (const id of ["log-mesh", "log-coords", "log-proc", "log-text", "log-stream"]) {
    $(id).addEventListener("input", () => renderLogs());
  }

  function openLogs(filter) {
    $("log-mesh").value = filter.mesh || "";
    $("log-coords").value = filter.coords || "";
    $("log-proc").value = filter.proc || "";
    activate("logs");
    renderLogs();
  }

  // ---- stacks and flame graphs --------------------------------------------------------

  function renderProcChoice() {
    const choice = $("stack-proc");
    const current = choice.value;
    const procs = allProcs().filter((p) => p.state === "running" || p.state === "lost");
    const ids = procs.map((p) => p.id);
    const shown = [...choice.options].map((o) => o.value);
    if (ids.join() !== shown.join()) {
      choice.replaceChildren(...procs.map((p) => el("option", { value: p.id, text: `${p.id}${p.pid ? ` (pid ${p.pid})` : ""}` })));
      if (ids.includes(current)) choice.value = current;
    }
  }

  function openStacks(proc, flame) {
    activate("stacks");
    renderProcChoice();
    $("stack-proc").value = proc;
    if (flame) takeProfile();
    else takeStacks();
  }

  const LIBRARY = /\/danaus\/|\/lib\/python3|^<frozen |site-packages/;

  async function takeStacks() {
    const proc = $("stack-proc").value;
    if (!proc) return;
    const status = $("stack-status");
    status.textContent = `taking the stacks of ${proc}…`;
    const started = performance.now();
    try {
      const view = await getJSON(`/api/stacks?proc=${encodeURIComponent(proc)}`);
      const took = performance.now() - started;
      status.textContent = `proc ${view.proc} (pid ${view.pid}): ${view.threads.length} threads, walked in ${(view.taken_seconds * 1000).toFixed(1)} ms, shown ${took.toFixed(0)} ms after asking`;
      // Threads running code of the program first: they are what a stack dump is taken for.
      const mine = (t) => t.frames.some(([, file]) => !LIBRARY.test(file));
      const threads = [...view.threads.filter(mine), ...view.threads.filter((t) => !mine(t))];
      $("stacks").replaceChildren(...threads.map(threadBlock));
    } catch (error) {
      status.textContent = "";
      $("stacks").replaceChildren(el("p", { class: "empty", text: `No stacks: ${error.message}` }));
    }
  }

  function frameLine([fn, file, line, code], top) {
    return el(
      "div",
      { class: `frame${LIBRARY.test(file) ? " lib" : ""}${top ? " top" : ""}` },
      el("span", { class: "fn", text: fn }),
      el("span", { class: "loc", text: `${file}:${line}` }),
      code ? el("span", { class: "code", text: code }) : null,
    );
  }

  /** A thread's stack, the innermost frame first; runs of library frames fold away. */
  function threadBlock(thread) {
    const frames = [...thread.frames].reverse();
    const mine = frames.findIndex(([, file]) => !LIBRARY.test(file));
    const block = el(
      "div",
      { class: "thread", data: { thread: thread.name } },
      el("h4", {}, el("span", { text: thread.name }), el("span", { class: "dim", text: `${thread.ident}${thread.daemon ? " · daemon" : ""} · ${frames.length} frames` })),
    );
    let run = [];
    const flush = () => {
      if (run.length > 2) {
        const folded = el("details", { class: "folded" }, el("summary", { text: `${run.length} frames of Danaus, asyncio and the standard library` }));
        folded.append(...run.map((f) => frameLine(f, false)));
        block.append(folded);
      } else {
        block.append(...run.map((f) => frameLine(f, false)));
      }
      run = [];
    };
    frames.forEach((frame, i) => {
      if (LIBRARY.test(frame[1]) && i !== 0) {
        run.push(frame);
        return;
      }
      flush();
      block.append(frameLine(frame, i === mine));
    });
    flush();
    return block;
  }

  async function takeProfile() {
    const proc = $("stack-proc").value;
    if (!proc) return;
    const seconds = Number($("profile-seconds").value) || 3;
    const status = $("stack-status");
    status.textContent = `sampling ${proc} for ${seconds} s…`;
    try {
      const view = await getJSON(`/api/profile?proc=${encodeURIComponent(proc)}&seconds=${seconds}`);
      status.textContent = `proc ${view.proc}: ${view.samples} samples over ${view.seconds} s (every ${(view.interval * 1000).toFixed(0)} ms, all threads)`;
      drawFlame(buildTree(view.stacks), view);
    } catch (error) {
      status.textContent = `No profile: ${error.message}`;
    }
  }

  function buildTree(stacks) {
    const root = { name: "all threads", value: 0, children: new Map() };
    for (const [folded, count] of Object.entries(stacks)) {
      let node = root;
      root.value += count;
      for (const name of folded.split(";")) {
        if (!node.children.has(name)) node.children.set(name, { name, value: 0, children: new Map(), parent: node });
        node = node.children.get(name);
        node.value += count;
      }
    }
    return root;
  }

  function drawFlame(root, view, zoomed) {
    const box = $("flame");
    const width = Math.max(600, box.clientWidth || 900);
    const row = 18;
    let depth = 0;
    const top = zoomed || root;
    const svg = el("svg:svg", { role: "img" });
    const scale = width / top.value;
    const place = (node, x, d) => {
      const w = node.value * scale;
      if (w < 0.5) return;
      depth = Math.max(depth, d);
      const isThread = d === 1 && !zoomed;
      const colour = d === 0 ? "#d9dde3" : isThread ? `hsl(${210 + (hue(node.name) % 30)}, 55%, 72%)` : `hsl(${18 + (hue(node.name) % 34)}, 88%, ${60 + (hue(node.name) % 14)}%)`;
      const rect = el("svg:rect", { x: x.toFixed(2), y: d * row, width: Math.max(0.5, w - 0.5).toFixed(2), height: row - 1, fill: colour });
      const share = ((node.value / root.value) * 100).toFixed(1);
      rect.append(el("svg:title", { text: `${node.name}\n${node.value} samples (${share}%)` }));
      rect.addEventListener("click", () => drawFlame(root, view, node === root ? null : node));
      svg.append(rect);
      if (w > 40) {
        const chars = Math.floor((w - 8) / 6.6);
        const text = node.name.length > chars ? node.name.slice(0, Math.max(0, chars - 1)) + "…" : node.name;
        svg.append(el("svg:text", { x: (x + 4).toFixed(2), y: d * row + 13, text }));
      }
      let cx = x;
      for (const child of [...node.children.values()].sort((a, b) => a.name.localeCompare(b.name))) {
        place(child, cx, d + 1);
        cx += child.value * scale;
      }
    };
    place(top, 0, 0);
    const height = (depth + 1) * row + 4;
    svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
    svg.setAttribute("height", height);
    box.replaceChildren(
      el(
        "div",
        { class: "caption" },
        el("b", { text: `Flame graph of ${view.proc}` }),
        el("span", { text: "each bar is a function, as wide as the share of samples it was on the stack in; the threads are the first row; click a bar to zoom" }),
        zoomed ? el("button", { type: "button", text: "whole graph", onclick: () => drawFlame(root, view, null) }) : null,
      ),
      svg,
    );
  }

  $("stack-take").addEventListener("click", takeStacks);
  $("profile-take").addEventListener("click", takeProfile);

  // ---- the trace timeline -------------------------------------------------------------

  function readTrace(perfetto) {
    const names = new Map();
    const order = new Map();
    const slices = [];
    const instants = [];
    const starts = new Map();
    const flows = [];
    for (const e of perfetto.traceEvents) {
      if (e.ph === "M" && e.name === "thread_name") names.set(e.tid, e.args.name);
      else if (e.ph === "M" && e.name === "thread_sort_index") order.set(e.tid, e.args.sort_index);
      else if (e.ph === "X") slices.push(e);
      else if (e.ph === "i") instants.push(e);
      else if (e.ph === "s") starts.set(e.id, e);
      else if (e.ph === "f" && starts.has(e.id)) flows.push([starts.get(e.id), e]);
    }
    const tids = [...names.keys()].sort((a, b) => (order.get(a) ?? a) - (order.get(b) ?? b));
    const row = new Map(tids.map((tid, i) => [tid, i]));
    let t0 = Infinity;
    let t1 = -Infinity;
    for (const s of slices) {
      t0 = Math.min(t0, s.ts);
      t1 = Math.max(t1, s.ts + s.dur);
    }
    for (const i of instants) {
      t0 = Math.min(t0, i.ts);
      t1 = Math.max(t1, i.ts);
    }
    if (t0 === Infinity) [t0, t1] = [0, 1];
    if (t1 <= t0) t1 = t0 + 1;
    return { names, tids, row, slices, instants, flows, t0, t1, view: [t0, t1] };
  }

  async function loadTrace() {
    const status = $("trace-status");
    status.textContent = "gathering the trace from every proc…";
    try {
      const perfetto = await getJSON("/api/trace.json");
      page.trace = readTrace(perfetto);
      status.textContent = `${page.trace.slices.length} message slices, ${page.trace.flows.length} arrows, ${page.trace.instants.length} events on ${page.trace.tids.length} tracks`;
      drawTimeline();
    } catch (error) {
      status.textContent = "";
      $("timeline").replaceChildren(el("p", { class: "empty", text: `No trace: ${error.message}` }));
    }
  }

  const INSTANT_COLOURS = { fail: "#d8413f", failure: "#d8413f", down: "#d8413f", lost: "#e2a21b", unhandled: "#8e1f1d", fault: "#b0309b", heal: "#2f9e5f", spawn: "#4a86d8", stop: "#8a939e", boot: "#4a86d8" };
  const MAX_SLICES = 4000;
  const MAX_FLOWS = 1500;

  function drawTimeline() {
    const trace = page.trace;
    const box = $("timeline");
    const width = Math.max(700, box.clientWidth || 1000);
    const gutter = 150;
    const track = 22;
    const axis = 26;
    const height = axis + trace.tids.length * track + 8;
    const [v0, v1] = trace.view;
    const x = (ts) => gutter + ((ts - v0) / (v1 - v0)) * (width - gutter - 12);
    const y = (tid) => axis + trace.row.get(tid) * track;
    const svg = el("svg:svg", { viewBox: `0 0 ${width} ${height}`, height, role: "img" });
    trace.tids.forEach((tid, i) => {
      if (i % 2 === 0) svg.append(el("svg:rect", { class: "band", x: 0, y: axis + i * track, width, height: track }));
      svg.append(el("svg:text", { class: "track-name", x: 8, y: axis + i * track + 15, text: trace.names.get(tid) }));
    });
    const span = v1 - v0;
    const label = (ts) => {
      const t = ts - trace.t0;
      if (span >= 2e6) return `${(t / 1e6).toFixed(span >= 2e7 ? 1 : 3)} s`;
      if (span >= 2e3) return `${(t / 1e3).toFixed(span >= 2e4 ? 1 : 3)} ms`;
      return `${t.toFixed(1)} µs`;
    };
    const ticks = 8;
    for (let i = 0; i <= ticks; i++) {
      const ts = v0 + (span * i) / ticks;
      const px = x(ts);
      svg.append(el("svg:line", { x1: px, x2: px, y1: axis - 6, y2: height, stroke: "#eceff3" }));
      if (i < ticks) svg.append(el("svg:text", { class: "axis", x: px + 3, y: 14, text: label(ts) }));
    }
    const visible = (a, b) => b >= v0 && a <= v1;
    const slices = trace.slices.filter((s) => visible(s.ts, s.ts + s.dur));
    const flows = trace.flows.filter(([s, f]) => visible(Math.min(s.ts, f.ts), Math.max(s.ts, f.ts)));
    const notes = [];
    if (flows.length <= MAX_FLOWS) {
      for (const [s, f] of flows) {
        svg.append(el("svg:line", { class: "flow", x1: x(s.ts), y1: y(s.tid) + track / 2, x2: x(f.ts), y2: y(f.tid) + track / 2 }));
      }
    } else {
      notes.push(`${flows.length} arrows in view: zoom in to see them`);
    }
    if (slices.length <= MAX_SLICES) {
      for (const s of slices) {
        const rect = el("svg:rect", { x: x(s.ts), y: y(s.tid) + 5, width: Math.max(1.5, x(s.ts + s.dur) - x(s.ts)), height: track - 10, rx: 1.5, fill: `hsl(${hue(s.name) % 360}, 55%, 52%)` });
        rect.append(el("svg:title", { text: `${s.name} at ${label(s.ts)}\n${JSON.stringify(s.args)}` }));
        svg.append(rect);
      }
    } else {
      // Too many to draw one by one: one mark per track and 2-pixel column that has any.
      const bins = new Map();
      for (const s of slices) {
        const key = `${s.tid}:${Math.floor(x(s.ts) / 2)}`;
        if (!bins.has(key)) bins.set(key, s);
      }
      for (const s of bins.values()) {
        svg.append(el("svg:rect", { x: Math.floor(x(s.ts) / 2) * 2, y: y(s.tid) + 5, width: 2, height: track - 10, fill: `hsl(${hue(s.name) % 360}, 55%, 52%)` }));
      }
      notes.push(`${slices.length} messages in view, drawn by density: zoom in to see each`);
    }
    $("trace-note").textContent = notes.join(" · ");
    for (const e of trace.instants) {
      if (!visible(e.ts, e.ts)) continue;
      const colour = INSTANT_COLOURS[e.cat] || "#59636e";
      const px = x(e.ts);
      if (e.s === "g") {
        svg.append(el("svg:line", { x1: px, x2: px, y1: axis, y2: height, stroke: colour, "stroke-dasharray": "4 3" }));
        continue;
      }
      const cy = y(e.tid) + track / 2;
      const mark = el("svg:path", { d: `M${px} ${cy - 6} L${px + 5} ${cy} L${px} ${cy + 6} L${px - 5} ${cy} Z`, fill: colour });
      mark.append(el("svg:title", { text: `${e.name} at ${label(e.ts)}\n${JSON.stringify(e.args)}` }));
      svg.append(mark);
    }
    attachZoom(svg, width, gutter);
    box.replaceChildren(svg);
  }

  function attachZoom(svg, width, gutter) {
    const trace = page.trace;
    const toTime = (clientX) => {
      const box = svg.getBoundingClientRect();
      const px = ((clientX - box.left) / box.width) * width;
      const [v0, v1] = trace.view;
      return v0 + ((px - gutter) / (width - gutter - 12)) * (v1 - v0);
    };
    svg.addEventListener("wheel", (e) => {
      e.preventDefault();
      const at = toTime(e.clientX);
      const factor = e.deltaY > 0 ? 1.25 : 0.8;
      const [v0, v1] = trace.view;
      const span = Math.min(trace.t1 - trace.t0, Math.max(1, (v1 - v0) * factor));
      let start = at - (at - v0) * (span / (v1 - v0));
      start = Math.max(trace.t0, Math.min(start, trace.t1 - span));
      trace.view = [start, start + span];
      requestAnimationFrame(drawTimeline);
    }, { passive: false });
    svg.addEventListener("mousedown", (e) => {
      const from = e.clientX;
      const [v0, v1] = trace.view;
      const perPixel = (v1 - v0) / ((svg.getBoundingClientRect().width * (width - gutter - 12)) / width);
      const move = (m) => {
        let start = v0 - (m.clientX - from) * perPixel;
        start = Math.max(trace.t0, Math.min(start, trace.t1 - (v1 - v0)));
        trace.view = [start, start + (v1 - v0)];
        requestAnimationFrame(drawTimeline);
      };
      const up = () => {
        window.removeEventListener("mousemove", move);
        window.removeEventListener("mouseup", up);
      };
      window.addEventListener("mousemove", move);
      window.addEventListener("mouseup", up);
    });
  }

  $("trace-load").addEventListener("click", loadTrace);

  // ---- reports ------------------------------------------------------------------------

  async function loadReports() {
    try {
      const reports = await getJSON("/api/reports");
      $("report-count").textContent = reports.length || "";
      if (!reports.length) return;
      $("reports").replaceChildren(
        el(
          "table",
          { class: "list" },
          el("thead", {}, el("tr", {}, ...["report", "in", "size", "modified"].map((h) => el("th", { text: h })))),
          el(
            "tbody",
            {},
            ...reports.map((r) =>
              el(
                "tr",
                {},
                el("td", {}, el("a", { href: `/reports/${r.id}/${encodeURIComponent(r.name.split("/").pop())}`, target: "_blank", rel: "noopener", text: r.name })),
                el("td", { class: "dim mono", text: r.folder }),
                el("td", { text: fmt.bytes(r.size) }),
                el("td", { text: new Date(r.modified * 1000).toLocaleString() }),
              ),
            ),
          ),
        ),
      );
    } catch (error) {
      $("reports").replaceChildren(el("p", { class: "empty", text: `No reports: ${error.message}` }));
    }
  }

  // ---- the simulator's cursor ---------------------------------------------------------

  let dragging = false;

  function renderSim(status) {
    page.sim = status;
    const seed = $("sim-seed");
    if (document.activeElement !== seed) seed.value = status.seed;
    $("sim-play").classList.toggle("on", status.playing);
    $("sim-follow").classList.toggle("on", status.following);
    const slider = $("sim-cursor");
    if (!dragging) slider.value = status.end > 0 ? Math.round((status.at / status.end) * 1000) : 1000;
    const where = status.running ? "running" : status.error ? "failed" : "finished";
    $("sim-time").textContent = `t = ${status.at.toFixed(6)} s of ${status.end.toFixed(6)} s · ${status.events} events · ${where}`;
    $("sim-digest").textContent = status.digest ? `digest ${status.digest.slice(0, 16)}… · returned ${status.value}` : "";
    if (status.error) notice(`The program raised:\n${status.error}`, true);
  }

  async function simOrder(order) {
    try {
      renderSim(await getJSON("/api/sim", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(order) }));
    } catch (error) {
      notice(error.message, true);
    }
  }

  $("sim-run").addEventListener("click", () => simOrder({ action: "run", seed: Number($("sim-seed").value) || 0 }));
  $("sim-play").addEventListener("click", () => simOrder({ action: page.sim && page.sim.playing ? "pause" : "play" }));
  $("sim-follow").addEventListener("click", () => simOrder({ action: "follow" }));
  $("sim-cursor").addEventListener("input", () => { dragging = true; });
  $("sim-cursor").addEventListener("change", (e) => {
    dragging = false;
    const end = page.sim ? page.sim.end : 0;
    simOrder({ action: "seek", at: (Number(e.target.value) / 1000) * end });
  });

  // ---- tabs ---------------------------------------------------------------------------

  function activate(name) {
    for (const button of document.querySelectorAll("#tabs button")) button.classList.toggle("active", button.dataset.tab === name);
    for (const tab of document.querySelectorAll("main > .tab")) tab.classList.toggle("active", tab.id === `tab-${name}`);
    if (name === "reports") loadReports();
    if (name === "timeline" && !page.trace) loadTrace();
    if (name === "logs") finishLogs();
  }

  $("tabs").addEventListener("click", (e) => {
    const button = e.target.closest("button");
    if (button) activate(button.dataset.tab);
  });

  document.addEventListener("visibilitychange", follow);
  follow();
  loadReports();
})();

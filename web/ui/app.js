// dgpu dashboard: one page with hash routes (#/, #/queue, #/tasks, #/tasks/ID, #/agents), served
// by the scheduler at /ui/ with no outside fetch. It loads the cluster once and then follows
// GET /api/v1/watch, read with fetch() rather than EventSource so that a bearer token can be
// sent when authentication is on.
'use strict';

const API = '/api/v1';
const TOKEN_KEY = 'dgpu.token';
const KEEP_FINISHED = 2000;  // Finished tasks remembered from the feed (the Tasks page asks the API).
const MAX_PENDING_SHOWN = 5000;  // Pending tasks listed at load; the queue page says so beyond.

const state = {
  nodes: new Map(),     // id -> node object (GET /agents)
  gpuBase: new Map(),   // node id -> [{index, model, status, health_reason}] (GET /gpus)
  tasks: new Map(),     // task id -> task object: every running and pending task, recent others
  quota: null,          // GET /quota
  teams: [],            // GET /teams
  loaded: false,
  pendingBeyond: 0,     // Pending tasks not listed at load (a very long queue).
  tasksLoaded: false,   // The running and pending tasks are listed (else GET /gpus says).
  live: false,
  seq: null,            // The last event id seen: resume point.
  leader: '',
};

// --- API ------------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

function authHeaders(extra) {
  const headers = Object.assign({}, extra || {});
  const token = localStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = 'Bearer ' + token;
  return headers;
}

async function call(path, init) {
  const r = await fetch(API + path, Object.assign({}, init || {}, {
    headers: authHeaders(init && init.headers),
  }));
  if (r.headers.get('X-Leader')) state.leader = r.headers.get('X-Leader');
  if (r.ok) return r;
  let code = '';
  let message = r.statusText;
  try {
    const body = await r.json();
    code = body.error.code;
    message = body.error.message;
  } catch (e) { /* not the API's error body */ }
  if (r.status === 401) showLogin(message);
  throw new ApiError(r.status, code, message);
}

async function getJson(path) {
  return (await call(path)).json();
}

// --- Helpers ----------------------------------------------------------------------------------

const $ = (id) => document.getElementById(id);

function esc(v) {
  return String(v === null || v === undefined ? '' : v).replace(/[&<>"']/g, (c) => ({
    '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;',
  })[c]);
}

function taskNumber(id) {
  return Number(String(id).replace('task-', '')) || 0;
}

function ago(iso) {
  if (!iso) return '';
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return Math.floor(s) + 's ago';
  if (s < 3600) return Math.floor(s / 60) + 'm ago';
  if (s < 86400) return Math.floor(s / 3600) + 'h' + Math.floor((s % 3600) / 60) + 'm ago';
  return Math.floor(s / 86400) + 'd ago';
}

function duration(from, to) {
  if (!from) return '';
  const s = Math.max(0, ((to ? Date.parse(to) : Date.now()) - Date.parse(from)) / 1000);
  if (s < 60) return s.toFixed(1) + 's';
  if (s < 3600) return Math.floor(s / 60) + 'm' + Math.floor(s % 60) + 's';
  return Math.floor(s / 3600) + 'h' + Math.floor((s % 3600) / 60) + 'm';
}

function status(s) {
  return '<span class="st ' + esc(s) + '">' + esc(s) + '</span>';
}

function taskLink(id) {
  return '<a href="#/tasks/' + esc(id) + '">' + esc(id) + '</a>';
}

function showBanner(text) {
  const b = $('banner');
  b.textContent = text || '';
  b.hidden = !text;
}

function showLogin(message) {
  $('login').hidden = false;
  showBanner(message || 'authentication required');
  render();
}

// --- State from the feed ----------------------------------------------------------------------

function applyTask(t) {
  state.tasks.set(t.task_id, t);
  if (state.tasks.size > KEEP_FINISHED * 2) pruneFinished();
}

function pruneFinished() {
  const finished = [];
  for (const t of state.tasks.values()) {
    if (t.status !== 'running' && t.status !== 'pending') finished.push(t.task_id);
  }
  finished.sort((a, b) => taskNumber(a) - taskNumber(b));
  for (const id of finished.slice(0, Math.max(0, finished.length - KEEP_FINISHED))) {
    state.tasks.delete(id);
  }
}

// `load` runs `wait` ms after the first call, once however many calls come meanwhile; its error
// is dropped (the next call tries again).
function batched(wait, load) {
  let timer = null;
  return () => {
    if (timer) return;
    timer = setTimeout(async () => {
      timer = null;
      try {
        await load();
        renderSoon();
      } catch (e) { /* the next call tries again */ }
    }, wait);
  };
}

// A node event can change GPUs (health, a new node); tasks change the quota's use; a quota event
// may come with team changes.
const refreshGpusSoon = batched(1000, async () => setGpuBase(await getJson('/gpus')));
const refreshQuotaSoon = batched(500, async () => { state.quota = await getJson('/quota'); });
const loadTeamsSoon = batched(1000, async () => { state.teams = (await getJson('/teams')).teams; });

function setGpuBase(body) {
  const base = new Map();
  for (const g of body.gpus) {
    if (!base.has(g.node_id)) base.set(g.node_id, []);
    base.get(g.node_id).push(g);
  }
  for (const list of base.values()) list.sort((a, b) => a.index - b.index);
  state.gpuBase = base;
}

function applyEvent(frame) {
  if (frame.event === 'task') {
    applyTask(frame.data);
    taskList.stale = true;
    refreshQuotaSoon();  // Its use changes as tasks start and end.
  } else if (frame.event === 'node') {
    state.nodes.set(frame.data.id, frame.data);
    refreshGpusSoon();
  } else if (frame.event === 'quota') {
    state.quota = frame.data;
    loadTeamsSoon();
  }
}

// Every task of a status, page by page (newest first), up to `most`: every running task (at most
// one per GPU), the first of a long queue.
async function listTasks(status, most) {
  const tasks = [];
  let after = '';
  while (tasks.length < most) {
    const page = await getJson('/tasks?status=' + status + '&limit=1000' + (after ? '&after=' + after : ''));
    tasks.push(...page.tasks);
    tasks.total = page.total;
    if (!page.next) break;
    after = page.next;
  }
  return tasks;
}

// Everything the pages show, listed anew; events that arrive meanwhile are applied after it
// (in order), so that the result is never older than the feed.
async function loadAll() {
  // The cluster first (the overview needs no task list: GET /gpus names each GPU's task), then
  // the running and pending tasks.
  const tasks = Promise.all([listTasks('running', Infinity), listTasks('pending', MAX_PENDING_SHOWN)]);
  const [gpus, agents, quota, teams] = await Promise.all([
    getJson('/gpus'), getJson('/agents'), getJson('/quota'), getJson('/teams'),
  ]);
  setGpuBase(gpus);
  state.nodes = new Map(agents.agents.map((a) => [a.id, a]));
  state.quota = quota;
  state.teams = teams.teams;
  state.loaded = true;
  render();
  const [running, pending] = await tasks;
  const kept = new Map();
  for (const t of state.tasks.values()) {
    if (t.status !== 'running' && t.status !== 'pending') kept.set(t.task_id, t);
  }
  for (const t of running.concat(pending)) kept.set(t.task_id, t);
  state.tasks = kept;
  // A queue longer than what was listed: its length is the API's, from then on approximate.
  state.pendingBeyond = Math.max(0, (pending.total || 0) - pending.length);
  state.tasksLoaded = true;
}

// --- The watch stream -------------------------------------------------------------------------

function parseFrame(text) {
  const frame = { id: null, event: 'message', data: '' };
  let any = false;
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const key = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (key === 'id') frame.id = Number(value);
    else if (key === 'event') frame.event = value;
    else if (key === 'data') frame.data += (frame.data ? '\n' : '') + value;
    else continue;
    any = true;
  }
  if (!any) return null;
  frame.data = frame.data ? JSON.parse(frame.data) : null;
  return frame;
}

async function watch() {
  for (;;) {
    let buffered = null;  // Frames held back while the lists load.
    try {
      const since = state.seq !== null ? '?since=' + state.seq : '';
      const r = await call('/watch' + since, { headers: { Accept: 'text/event-stream' } });
      // For tests: how the feed came (the browser asks for it compressed by itself).
      window.dgpuFeed = { encoding: r.headers.get('Content-Encoding') || 'identity' };
      setLive(true);
      const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
      let text = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        text += value;
        let end;
        while ((end = text.indexOf('\n\n')) >= 0) {
          const frame = parseFrame(text.slice(0, end));
          text = text.slice(end + 2);
          if (!frame) continue;
          if (frame.id !== null) state.seq = frame.id;
          if ((frame.event === 'sync' && !state.loaded) || frame.event === 'reset') {
            // Caught up (first time), or events were lost: list everything again.
            state.loaded = false;
            state.tasksLoaded = false;
            buffered = [];
            loadAll().then(() => {
              for (const f of buffered) applyEvent(f);
              buffered = null;
              showBanner('');
              render();
            }, (e) => {
              buffered = null;
              showBanner('cannot load the cluster: ' + e.message);
            });
            continue;
          }
          if (buffered) {
            buffered.push(frame);
          } else {
            applyEvent(frame);
            renderSoon();
          }
        }
      }
    } catch (e) {
      if (e instanceof ApiError && e.status !== 401) showBanner('watch: ' + e.message);
    }
    setLive(false);
    await new Promise((resolve) => setTimeout(resolve, 2000));
  }
}

function setLive(on) {
  state.live = on;
  const el = $('live');
  el.textContent = on ? 'live' : 'reconnecting';
  el.className = 'live' + (on ? '' : ' off');
  $('leader').textContent = state.leader ? 'leader ' + state.leader : '';
}

// --- Pages ------------------------------------------------------------------------------------

function gpuCell(node, g, byGpu) {
  const key = node.id + '/' + g.index;
  let task = byGpu.get(key);
  if (!task && !state.tasksLoaded && g.status === 'busy' && g.current_task) {
    // Until the tasks are listed: what GET /gpus said (its class unknown yet).
    task = { task_id: g.current_task, priority: '', name: '', team: '' };
  }
  let cls = 'idle';
  let title = key + ' ' + (g.model || '');
  if (node.status === 'offline') {
    cls = 'offline';
    title += ': offline';
  } else if (g.status === 'unhealthy') {
    cls = 'unhealthy';
    title += ': unhealthy' + (g.health_reason ? ' (' + g.health_reason + ')' : '');
  }
  if (task) {
    cls = 'busy' + (task.priority ? (task.priority === 'high' ? ' online' : ' batch') : '');
    title += ': ' + task.task_id + (task.name ? ' ' + task.name : '') +
      (task.team ? ' (' + task.team + ')' : '');
  } else if (cls === 'idle') {
    title += ': idle';
  }
  if (typeof g.utilization === 'number' && cls !== 'offline') {
    title += ', ' + Math.round(g.utilization * 100) + '% utilized';
  }
  return '<i class="g ' + cls + '" title="' + esc(title) + '"' +
         (task ? ' data-task="' + esc(task.task_id) + '"' : '') + '></i>';
}

function pageOverview() {
  const byGpu = new Map();
  let running = 0;
  let pending = 0;
  for (const t of state.tasks.values()) {
    if (t.status === 'pending') pending++;
    if (t.status !== 'running') continue;
    running++;
    for (const a of t.allocation || []) {
      for (const i of a.gpu_indices) byGpu.set(a.node_id + '/' + i, t);
    }
  }
  const nodes = Array.from(state.nodes.values()).sort((a, b) => a.id.localeCompare(b.id, undefined, { numeric: true }));
  const counts = { total: 0, busy: 0, idle: 0, offline: 0, unhealthy: 0 };
  const cards = [];
  for (const n of nodes) {
    const gpus = state.gpuBase.get(n.id) ||
      Array.from({ length: n.gpus }, (_, i) => ({ index: i, status: 'idle' }));
    const cells = [];
    let reported = 0;
    let utilization = 0;
    for (const g of gpus) {
      if (typeof g.utilization === 'number') {
        reported++;
        utilization += g.utilization;
      }
      const cell = gpuCell(n, g, byGpu);
      counts.total++;
      if (cell.includes('"g offline')) counts.offline++;
      else if (cell.includes('"g unhealthy')) counts.unhealthy++;
      else if (cell.includes('"g busy')) counts.busy++;
      else counts.idle++;
      cells.push(cell);
    }
    cards.push('<div class="node ' + esc(n.status) + '"><div class="h"><b title="' + esc(n.id) +
               (n.address ? ' (' + esc(n.address) + ')' : '') + '">' + esc(n.id) + '</b><span>' +
               (n.status === 'online' ? (n.gpus - n.free_gpus) + '/' + n.gpus +
                 (reported ? ' · ' + Math.round(100 * utilization / reported) + '%' : '')
                 : esc(n.status)) +
               '</span></div><div class="gpus">' + cells.join('') + '</div></div>');
  }
  const q = state.quota;
  const quotaRows = q ? ['online', 'batch'].map((c) => {
    const cls = q[c];
    const total = Math.max(1, q.total_gpus);
    const used = Math.min(100, 100 * cls.used / total);
    const mark = Math.min(100, 100 * cls.quota / total);
    return '<b>' + c + '</b><div class="bar"><span class="' + c + '" style="width:' + used.toFixed(2) +
           '%"></span><span class="mark" style="width:' + mark.toFixed(2) + '%"></span></div>' +
           '<span>' + cls.used + ' of ' + cls.quota + ' GPUs' +
           (cls.borrowed ? ', ' + cls.borrowed + ' borrowed' : '') + '</span>';
  }).join('') : '';
  const teams = state.teams.filter((t) => t.configured || t.online.used || t.batch.used || t.pending);
  const teamRows = teams.map((t) => '<tr><td>' + esc(t.name) + '</td><td>' + t.online.used + ' / ' +
    t.online.guaranteed + '</td><td>' + t.batch.used + ' / ' + t.batch.guaranteed + '</td><td>' +
    (t.max_gpus === null ? '' : t.max_gpus) + '</td><td>' + t.pending + '</td></tr>').join('');
  return '<h1>Cluster</h1><div class="cards">' +
    card(counts.total, 'GPUs') + card(counts.busy, 'busy') + card(counts.idle, 'idle') +
    card(counts.offline, 'offline') + card(counts.unhealthy, 'unhealthy') +
    card(nodes.length, 'nodes') + card(running, 'tasks running') +
    card('<a href="#/queue">' + (pending + state.pendingBeyond) + '</a>', 'tasks pending') + '</div>' +
    '<h2>Quotas</h2><div class="quota" id="quota">' + quotaRows + '</div>' +
    (teams.length ? '<h2>Teams</h2><table class="teams" style="max-width:760px"><tr><th>team</th>' +
      '<th>online used / guaranteed</th><th>batch used / guaranteed</th><th>max GPUs</th>' +
      '<th>pending</th></tr>' + teamRows + '</table>' : '') +
    '<h2>GPUs by node</h2><div class="legend"><span><i class="busy-online"></i>busy (online)</span>' +
    '<span><i class="busy-batch"></i>busy (batch)</span><span><i class="idle"></i>idle</span>' +
    '<span><i class="offline"></i>offline</span><span><i class="unhealthy"></i>unhealthy</span>' +
    '<span>busy/total · mean utilization per node; click a busy GPU for its task</span></div>' +
    '<div class="nodes" id="nodes">' + cards.join('') + '</div>';
}

function card(n, label) {
  return '<div class="card"><div class="n">' + n + '</div><div class="l">' + esc(label) + '</div></div>';
}

function taskRow(t, columns) {
  const cells = {
    id: taskLink(t.task_id),
    name: esc(t.name),
    status: status(t.status),
    priority: esc(t.priority),
    team: esc(t.team),
    user: esc(t.user),
    gpus: esc(t.gpu_count),
    node: esc(t.node_id || ''),
    reason: esc(t.pending_reason || ''),
    waiting: esc(duration(t.created_at)),
    age: esc(ago(t.created_at)),
    runtime: esc(t.started_at ? duration(t.started_at, t.finished_at) : ''),
    exit: esc(t.exit_code === null ? (t.error || '') : t.exit_code + (t.error ? ' ' + t.error : '')),
    command: esc(t.command),
  };
  return '<tr>' + columns.map((c) => '<td' + (c === 'command' ? ' class="cmd" title="' +
    esc(t.command) + '"' : '') + '>' + cells[c] + '</td>').join('') + '</tr>';
}

function taskTable(tasks, columns, empty) {
  if (!tasks.length) return '<p class="muted">' + esc(empty) + '</p>';
  return '<table><tr>' + columns.map((c) => '<th>' + c + '</th>').join('') + '</tr>' +
    tasks.map((t) => taskRow(t, columns)).join('') + '</table>';
}

function pageQueue() {
  if (!state.tasksLoaded) return '<h1>Queue</h1><p class="muted">Listing the queue…</p>';
  const pending = Array.from(state.tasks.values()).filter((t) => t.status === 'pending');
  pending.sort((a, b) => (a.priority === b.priority ? 0 : a.priority === 'high' ? -1 : 1) ||
    taskNumber(a.task_id) - taskNumber(b.task_id));
  const reasons = new Map();
  for (const t of pending) {
    const r = t.pending_reason || 'queued';
    reasons.set(r, (reasons.get(r) || 0) + 1);
  }
  return '<h1>Queue <span class="muted">(' + (pending.length + state.pendingBeyond) +
    ' pending)</span></h1>' +
    '<div class="cards">' + Array.from(reasons).map(([r, n]) => card(n, r)).join('') + '</div>' +
    taskTable(pending.slice(0, 1000),
      ['id', 'name', 'priority', 'team', 'user', 'gpus', 'reason', 'waiting', 'command'],
      'Nothing is waiting.') +
    (pending.length > 1000 ? '<p class="muted">The first 1,000 are shown; the Tasks page lists ' +
      'them all (status pending).</p>' : '');
}

// The Tasks page lists from the API with its filters; `after` walks pages.
const taskList = { query: '', page: null, pages: [''], error: '', stale: false };

async function loadTaskList(query) {
  const after = taskList.pages[taskList.pages.length - 1];
  const q = new URLSearchParams(query);
  q.set('limit', '50');
  if (after) q.set('after', after);
  try {
    taskList.page = await getJson('/tasks?' + q.toString());
    taskList.error = '';
  } catch (e) {
    taskList.error = e.message;
  }
  taskList.query = query;
  render();
}

function pageTasks(params) {
  const query = new URLSearchParams();
  for (const k of ['status', 'priority', 'team']) if (params.get(k)) query.set(k, params.get(k));
  const qs = query.toString();
  if (qs !== taskList.query) {
    taskList.pages = [''];
    taskList.page = null;
    taskList.query = qs;
    loadTaskList(qs);
  }
  const select = (name, values) => '<select data-filter="' + name + '"><option value="">any ' +
    name + '</option>' + values.map((v) => '<option' + (params.get(name) === v ? ' selected' : '') +
    '>' + v + '</option>').join('') + '</select>';
  const page = taskList.page;
  return '<h1>Tasks</h1><div class="filters">' +
    select('status', ['pending', 'running', 'success', 'failed', 'cancelled']) +
    select('priority', ['high', 'low']) +
    '<input data-filter="team" placeholder="team" size="12" value="' + esc(params.get('team') || '') + '">' +
    (page ? '<span class="muted">' + page.total + ' tasks</span>' : '') + '</div>' +
    (taskList.error ? '<p class="muted">' + esc(taskList.error) + '</p>' : '') +
    (page ? taskTable(page.tasks, ['id', 'name', 'status', 'priority', 'team', 'gpus', 'node',
      'age', 'runtime', 'exit', 'command'], 'No task matches.') +
      '<div class="pager">' + (taskList.pages.length > 1 ? '<button id="prev">Newer</button>' : '') +
      (page.next ? '<button id="next" data-next="' + esc(page.next) + '">Older</button>' : '') +
      '</div>' : '<p class="muted">Loading…</p>');
}

function pageAgents() {
  const nodes = Array.from(state.nodes.values()).sort((a, b) => a.id.localeCompare(b.id, undefined, { numeric: true }));
  if (!nodes.length) return '<h1>Agents</h1><p class="muted">No agent has registered.</p>';
  // Given to tasks of what the node offers ('' where it reports none).
  const given = (n, used, total, unit) => (n[total] == null ? '' : esc(n[used]) + '/' + esc(n[total]) + unit);
  return '<h1>Agents <span class="muted">(' + nodes.length + ')</span></h1><table><tr><th>node</th>' +
    '<th>status</th><th>address</th><th>GPUs</th><th>free</th><th>CPUs</th><th>memory</th>' +
    '<th>isolation</th><th>tasks</th><th>labels</th>' +
    '<th>last heartbeat</th></tr>' + nodes.map((n) => '<tr><td>' + esc(n.id) + '</td><td>' +
      status(n.status) + '</td><td>' + esc(n.address) + '</td><td>' + n.gpus + '</td><td>' +
      n.free_gpus + '</td><td>' + given(n, 'allocated_cpus', 'cpus', '') + '</td><td>' +
      given(n, 'allocated_memory_mb', 'memory_mb', ' MiB') + '</td><td>' + esc(n.isolation || '') +
      '</td><td>' + n.tasks + '</td><td>' +
      esc(Object.entries(n.labels || {}).map(([k, v]) => k + '=' + v).join(', ')) + '</td><td>' +
      esc(ago(n.last_heartbeat)) + '</td></tr>').join('') + '</table>';
}

// The task page: its fields, its history and its log, followed while it runs.
const taskPage = { id: null, task: null, events: null, error: '', log: null };

function openTask(id) {
  if (taskPage.id === id) return;
  closeTask();
  taskPage.id = id;
  taskPage.task = state.tasks.get(id) || null;
  loadTaskDetails();
}

function closeTask() {
  if (taskPage.log) taskPage.log.abort();
  Object.assign(taskPage, { id: null, task: null, events: null, error: '', log: null, logText: '', logNote: '' });
}

async function loadTaskDetails() {
  const id = taskPage.id;
  try {
    const [task, events] = await Promise.all([getJson('/tasks/' + id), getJson('/tasks/' + id + '/events')]);
    if (taskPage.id !== id) return;
    taskPage.task = task;
    taskPage.events = events.events;
    taskPage.error = '';
    if (!taskPage.log && task.status !== 'pending') followLog(id);
    if (!taskPage.log && task.status === 'pending' && task.attempts + task.preemptions > 0) followLog(id);
  } catch (e) {
    if (taskPage.id === id) taskPage.error = e.message;
  }
  render();
}

async function followLog(id) {
  const controller = new AbortController();
  taskPage.log = controller;
  taskPage.logText = '';
  taskPage.logNote = 'reading…';
  render();
  try {
    const r = await call('/tasks/' + id + '/logs?tail=2000&follow=true', { signal: controller.signal });
    taskPage.logNote = 'from ' + (r.headers.get('X-Dgpu-Node') || 'its node');
    const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      if (taskPage.id !== id) return;
      taskPage.logText += value;
      if (taskPage.logText.length > 4000000) taskPage.logText = taskPage.logText.slice(-2000000);
      renderLog();
    }
    if (taskPage.id === id) taskPage.logNote += ' (complete)';
  } catch (e) {
    if (taskPage.id !== id || e.name === 'AbortError') return;
    taskPage.logNote = e.message;
  }
  if (taskPage.id === id) {
    taskPage.log = null;
    renderLog();
  }
}

function renderLog() {
  const pre = $('log');
  if (!pre) return;
  const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
  pre.textContent = taskPage.logText;
  if (atBottom) pre.scrollTop = pre.scrollHeight;
  const note = $('lognote');
  if (note) note.textContent = taskPage.logNote || '';
}

// CPU ids as the kernel lists them: [0, 1, 2, 5] -> "0-2,5".
function cpuList(cpus) {
  const ranges = [];
  for (const c of cpus) {
    const last = ranges[ranges.length - 1];
    if (last && last[1] === c - 1) last[1] = c; else ranges.push([c, c]);
  }
  return ranges.map(([a, b]) => (a === b ? String(a) : a + '-' + b)).join(',');
}

function pageTask(id) {
  openTask(id);
  const live = state.tasks.get(id);
  const t = live && taskPage.task && live.status !== taskPage.task.status ? live : taskPage.task;
  if (live && taskPage.task && live.status !== taskPage.task.status) loadTaskDetails();
  if (!t) return '<h1>' + esc(id) + '</h1><p class="muted">' + esc(taskPage.error || 'Loading…') + '</p>';
  const fields = [
    ['status', status(t.status) + (t.pending_reason ? ' <span class="muted">' + esc(t.pending_reason) + '</span>' : '')],
    // Which nodes could take a pending task and why not the others (GET /tasks/{id} only).
    ['placement', esc(t.status === 'pending' && t.pending_detail ? t.pending_detail : '')],
    ['name', esc(t.name)], ['priority', esc(t.priority)], ['team', esc(t.team)], ['user', esc(t.user)],
    ['GPUs', esc(t.gpu_count) + (t.gpu_model ? ' × ' + esc(t.gpu_model) : '')],
    ['allocation', esc((t.allocation || []).map((a) => a.node_id + ': GPU ' + a.gpu_indices.join(',') +
      (a.cpu_set ? ', CPUs ' + cpuList(a.cpu_set) : '')).join('; '))],
    ['CPUs / memory', t.cpus == null && t.memory_mb == null ? '' :
      esc(t.cpus == null ? '-' : t.cpus) + ' / ' + esc(t.memory_mb == null ? '-' : t.memory_mb + ' MiB') +
      (t.cpu_set ? ' <span class="muted">bound to CPUs ' + esc(cpuList(t.cpu_set)) + '</span>' : '')],
    ['usage', t.usage ? esc(t.usage.cpu_seconds.toFixed(1) + ' CPU seconds, peak ' + t.usage.max_memory_mb + ' MiB') : ''],
    ['node selector', esc(Object.entries(t.node_selector || {}).map(([k, v]) => k + '=' + v).join(', '))],
    // The tasks it waits for, each a link to its page, with its condition and where it stands.
    ['depends on', (t.depends_on || []).map((d) => '<a href="#/tasks/' + esc(d.task_id) + '">' +
      esc(d.task_id) + '</a> ' + esc(d.condition) + ' <span class="muted">' + esc(d.state) + '</span>').join(', ')],
    ['command', '<code>' + esc(t.command) + '</code>'],
    ['created', esc(t.created_at || '') + ' <span class="muted">' + esc(ago(t.created_at)) + '</span>'],
    ['started', esc(t.started_at || '')], ['finished', esc(t.finished_at || '')],
    ['runtime', esc(t.started_at ? duration(t.started_at, t.finished_at) : '')],
    ['attempts', esc(t.attempts) + (t.retries ? ', ' + t.retries + ' retries' : '') +
      (t.preemptions ? ', ' + t.preemptions + ' preemptions' : '')],
    ['exit code', esc(t.exit_code === null ? '' : t.exit_code)], ['error', esc(t.error)],
  ];
  const events = taskPage.events || [];
  return '<h1>' + esc(t.task_id) + (t.name ? ' <span class="muted">' + esc(t.name) + '</span>' : '') +
    '</h1><div class="two"><div><dl class="kv">' +
    fields.map(([k, v]) => '<dt>' + k + '</dt><dd>' + v + '</dd>').join('') + '</dl>' +
    '<h2>Events</h2><table id="events"><tr><th>time</th><th>type</th><th>node</th><th>message</th></tr>' +
    events.map((e) => '<tr><td>' + esc(e.time.replace('T', ' ').replace('Z', '')) + '</td><td>' +
      esc(e.type) + '</td><td>' + esc(e.node_id || '') + '</td><td>' + esc(e.message) + '</td></tr>').join('') +
    '</table></div><div><h2 style="margin-top:0">Log <span class="muted" id="lognote">' +
    esc(taskPage.logNote || (t.status === 'pending' ? 'not started yet' : '')) + '</span></h2>' +
    '<pre class="log" id="log"></pre></div></div>';
}

// --- Routing and rendering --------------------------------------------------------------------

function route() {
  const hash = location.hash.replace(/^#/, '') || '/';
  const [path, query] = hash.split('?');
  const params = new URLSearchParams(query || '');
  const m = path.match(/^\/tasks\/(task-\d+)$/);
  if (m) return { page: 'task', id: m[1], params };
  if (path === '/queue') return { page: 'queue', params };
  if (path === '/tasks') return { page: 'tasks', params };
  if (path === '/agents') return { page: 'agents', params };
  return { page: 'overview', params };
}

let renderTimer = null;
let lastRender = 0;
function renderSoon() {
  // At most four renders a second, however fast the feed is.
  if (renderTimer) return;
  const wait = Math.max(0, 250 - (performance.now() - lastRender));
  renderTimer = setTimeout(() => {
    renderTimer = null;
    render();
  }, wait);
}

let tasksRefresh = null;
function render() {
  lastRender = performance.now();
  const r = route();
  for (const a of document.querySelectorAll('header nav a')) {
    a.classList.toggle('active', a.dataset.page === (r.page === 'task' ? 'tasks' : r.page));
  }
  if (r.page !== 'task' && taskPage.id) closeTask();
  const main = $('main');
  if (!state.loaded && r.page !== 'task' && r.page !== 'tasks') {
    main.innerHTML = '<p class="muted">' + ($('login').hidden ? 'Loading the cluster…'
      : 'Give a token above to see the cluster.') + '</p>';
    return;
  }
  let html = '';
  if (r.page === 'overview') html = pageOverview();
  else if (r.page === 'queue') html = pageQueue();
  else if (r.page === 'tasks') html = pageTasks(r.params);
  else if (r.page === 'agents') html = pageAgents();
  else html = pageTask(r.id);
  main.innerHTML = html;
  if (r.page === 'task') renderLog();
  // For benchmarks and tests: when the last render ended and what it cost (ms).
  window.dgpuRender = { at: performance.now(), ms: performance.now() - lastRender, page: r.page };
  document.title = 'dgpu · ' + (r.page === 'task' ? r.id : r.page);
  if (r.page === 'tasks' && taskList.stale && !tasksRefresh) {
    // Tasks changed (the feed says so): the page is asked again, at most every 2 s.
    tasksRefresh = setTimeout(() => {
      tasksRefresh = null;
      taskList.stale = false;
      if (route().page === 'tasks') loadTaskList(taskList.query);
    }, 2000);
  }
}

document.addEventListener('click', (e) => {
  const g = e.target.closest('[data-task]');
  if (g) location.hash = '#/tasks/' + g.dataset.task;
  if (e.target.id === 'next') {
    taskList.pages.push(e.target.dataset.next);
    loadTaskList(taskList.query);
  } else if (e.target.id === 'prev') {
    taskList.pages.pop();
    loadTaskList(taskList.query);
  }
});

document.addEventListener('change', (e) => {
  const name = e.target.dataset && e.target.dataset.filter;
  if (!name) return;
  const params = route().params;
  if (e.target.value) params.set(name, e.target.value);
  else params.delete(name);
  const qs = params.toString();
  location.hash = '#/tasks' + (qs ? '?' + qs : '');
});

$('login').addEventListener('submit', (e) => {
  e.preventDefault();
  localStorage.setItem(TOKEN_KEY, $('token').value.trim());
  $('login').hidden = true;
  showBanner('');
  location.reload();
});

window.addEventListener('hashchange', render);
// Relative times ("waiting 3m") move on by themselves; a task page (its log) and the Tasks page
// (asked from the API) are left as they are.
// Heartbeats are not events: the agents page asks for the agents again.
const refreshAgentsSoon = batched(0, async () => {
  const agents = await getJson('/agents');
  state.nodes = new Map(agents.agents.map((a) => [a.id, a]));
});
// Utilization comes with heartbeats, not events: the overview asks for the GPUs again every 10 s
// (every 60 s beyond 4,000 GPUs, whose list is megabytes).
let ticks = 0;
setInterval(() => {
  const page = route().page;
  ticks++;
  let gpus = 0;
  for (const list of state.gpuBase.values()) gpus += list.length;
  if (page === 'overview' && state.loaded && ticks % (gpus > 4000 ? 12 : 2) === 0) {
    refreshGpusSoon();
  }
  if (page === 'agents' && state.loaded) refreshAgentsSoon();
  if (page !== 'task' && page !== 'tasks') renderSoon();
}, 5000);
render();
watch();

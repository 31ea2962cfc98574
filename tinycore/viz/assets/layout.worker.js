// Lays out one graph off the main thread: {id, nodes: [{id, width, height}], edges: [[from, to]]} (nodes in
// toposort order, sources first) -> {id, nodes: [{id, x, y}], edges: [{from, to, points}], width, height, engine}.
// dagre for graphs up to DAGRE_LIMIT nodes; its time grows about with the square of the nodes plus the long edges'
// bends (here a 190-node pass took seconds, a 580-node schedule tens of seconds), so larger graphs get a layered
// layout of our own: ranks by longest path, a few barycenter sweeps to order each rank, straight edges.
importScripts("/assets/vendor/dagre.min.js");

const DAGRE_LIMIT = 150;
const NODE_GAP = 14, RANK_GAP = 28, SWEEPS = 4;

function dagreLayout(request) {
  const graph = new dagre.graphlib.Graph({ multigraph: true });
  graph.setGraph({ rankdir: "TB", nodesep: NODE_GAP, ranksep: RANK_GAP, edgesep: 6 });
  graph.setDefaultEdgeLabel(() => ({}));
  for (const node of request.nodes) graph.setNode(String(node.id), { width: node.width, height: node.height });
  request.edges.forEach(([from, to], number) => graph.setEdge(String(from), String(to), {}, String(number)));
  dagre.layout(graph);
  const nodes = request.nodes.map((node) => {
    const placed = graph.node(String(node.id));
    return { id: node.id, x: placed.x, y: placed.y };
  });
  const edges = graph.edges().map((edge) => ({ from: Number(edge.v), to: Number(edge.w),
                                               points: graph.edge(edge).points }));
  const size = graph.graph();
  return { nodes, edges, width: size.width, height: size.height, engine: "dagre" };
}

function layeredLayout(request) {
  const byId = new Map(request.nodes.map((node) => [node.id, { ...node, sources: [], users: [] }]));
  for (const [from, to] of request.edges) {
    byId.get(to).sources.push(byId.get(from));
    byId.get(from).users.push(byId.get(to));
  }
  const order = request.nodes.map((node) => byId.get(node.id));  // toposort: sources before users
  for (const node of order) node.rank = node.sources.reduce((rank, source) => Math.max(rank, source.rank + 1), 0);
  // a leaf (a constant, a buffer) sits just above its first user instead of at the top
  for (const node of order) {
    if (!node.sources.length && node.users.length) {
      node.rank = Math.max(0, Math.min(...node.users.map((user) => user.rank)) - 1);
    }
  }
  const ranks = [];
  for (const node of order) (ranks[node.rank] ||= []).push(node);
  const place = () => ranks.forEach((rank) => rank && rank.forEach((node, position) => { node.position = position; }));
  const mean = (nodes, fallback) => nodes.length ?
    nodes.reduce((total, node) => total + node.position, 0) / nodes.length : fallback;
  place();
  for (let sweep = 0; sweep < SWEEPS; sweep++) {
    const down = sweep % 2 === 0;
    const sequence = down ? ranks : [...ranks].reverse();
    for (const rank of sequence) {
      if (!rank) continue;
      for (const node of rank) node.key = mean(down ? node.sources : node.users, node.position);
      rank.sort((left, right) => left.key - right.key);
      rank.forEach((node, position) => { node.position = position; });
    }
  }
  let top = 0, width = 0;
  for (const rank of ranks) {
    if (!rank) continue;
    const height = Math.max(...rank.map((node) => node.height));
    let left = 0;
    for (const node of rank) {
      node.x = left + node.width / 2;
      node.y = top + height / 2;
      left += node.width + NODE_GAP;
    }
    width = Math.max(width, left);
    top += height + RANK_GAP;
  }
  for (const rank of ranks) {  // centre each rank
    if (!rank || !rank.length) continue;
    const last = rank[rank.length - 1];
    const shift = (width - (last.x + last.width / 2)) / 2;
    for (const node of rank) node.x += shift;
  }
  const nodes = order.map((node) => ({ id: node.id, x: node.x, y: node.y }));
  const edges = request.edges.map(([from, to]) => {
    const source = byId.get(from), target = byId.get(to);
    return { from, to, points: [{ x: source.x, y: source.y + source.height / 2 },
                                { x: target.x, y: target.y - target.height / 2 }] };
  });
  return { nodes, edges, width, height: top, engine: "layered" };
}

self.onmessage = (event) => {
  const request = event.data;
  const result = request.nodes.length <= DAGRE_LIMIT ? dagreLayout(request) : layeredLayout(request);
  self.postMessage({ id: request.id, ...result });
};

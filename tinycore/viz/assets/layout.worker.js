// Lays out one graph with dagre off the main thread: {id, nodes: [{id, width, height}], edges: [[from, to]]}
// -> {id, nodes: [{id, x, y}], edges: [{from, to, points}], width, height}.
importScripts("/assets/vendor/dagre.min.js");

self.onmessage = (event) => {
  const request = event.data;
  const graph = new dagre.graphlib.Graph({ multigraph: true });
  graph.setGraph({ rankdir: "TB", nodesep: 14, ranksep: 28, edgesep: 6 });
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
  self.postMessage({ id: request.id, nodes, edges, width: size.width, height: size.height });
};

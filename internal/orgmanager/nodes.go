package orgmanager

import (
	"context"
	"net/http"

	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/nodehealth"
)

// NodeLister reads the filter nodes' last heartbeats (nodehealth.List over
// the svcpf_nodes bucket); the console's Nodes page reads the same one.
type NodeLister interface {
	Nodes(ctx context.Context) ([]nodehealth.Node, error)
}

// nodesBody is GET /nodes' answer.
type nodesBody struct {
	Nodes []nodehealth.Node `json:"nodes"`
}

// listNodes answers GET /nodes (admin only: the guard's Authorize; asked
// again here so a listener mounted without the guard refuses too).
func (a *API) listNodes(w http.ResponseWriter, r *http.Request) {
	p, ok := principal(w, r)
	if !ok {
		return
	}
	if err := p.Platform(); err != nil {
		denied(w, err)
		return
	}
	if a.nodes == nil {
		httpapi.WriteError(w, http.StatusServiceUnavailable, "no NATS: the nodes announce themselves over NATS, which this orgmanager has not been given (nats.url)")
		return
	}
	nodes, err := a.nodes.Nodes(r.Context())
	if err != nil {
		httpapi.WriteError(w, http.StatusServiceUnavailable, "the nodes' bucket cannot be read: "+err.Error())
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, nodesBody{Nodes: nodes})
}

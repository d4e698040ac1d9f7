package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/forever-agents/forever/agents"
	"github.com/forever-agents/forever/eventlog"
)

// ListSubject is the subject of the listing on the NATS service:
// <prefix>.list. Its payload is an agents.Query ({"user", "tag", "type",
// "cursor", "limit"}, all optional), its reply an agents.Page
// ({"agents": [...], "next": "..."}). Any node answers it from its own
// view; a tenant's credential lists its tenant's agents only (its own
// account).
func ListSubject(prefix string) string { return prefix + ".list" }

// serveList answers a listing request, admitted (admit) like a command.
func (h *Host) serveList(ctx context.Context, req micro.Request) {
	var q agents.Query
	if err := decodePayload(req.Data(), &q); err != nil {
		RespondError(req, err)
		return
	}
	page, err := h.List(ctx, q)
	if err != nil {
		RespondError(req, err)
		return
	}
	if err := req.RespondJSON(page); err != nil {
		h.logger.Warn("respond", "subject", req.Subject(), "err", err)
	}
}

// A listing of a node with owned views (--owned-views: each node's views
// hold the partitions it owns): the node that takes it asks each owner for
// the page of its partitions, on <prefix>.node.<node>.list, and merges
// them. Pages are in agent id order and a cursor is an agent id, so the
// merge is the first Limit agents of the owners' pages, and its cursor
// the last of them. A partition without an owner (a handoff) is waited
// for, as a command waits (handoffWait).

// partsList is the request of a node's listing: q over the agents of
// Parts, each of which the node must own.
type partsList struct {
	Query agents.Query `json:"query"`
	Parts []int        `json:"parts"`
}

// nodeListSubject is where node answers the listing of its partitions.
func (h *Host) nodeListSubject(node string) string {
	return h.deps.Log.Prefix() + ".node." + node + ".list"
}

// serveNodeList answers the listings other nodes ask of this one's
// partitions.
func (h *Host) serveNodeList(ctx context.Context) (*nats.Subscription, error) {
	sub, err := h.deps.Conn.Subscribe(h.nodeListSubject(h.own.Node()), func(m *nats.Msg) {
		h.handling.Add(1)
		go func() {
			defer h.handling.Done()
			h.answerNodeList(ctx, m)
		}()
	})
	if err != nil {
		return nil, fmt.Errorf("agentd: subscribe to node listings: %w", err)
	}
	return sub, nil
}

func (h *Host) answerNodeList(ctx context.Context, m *nats.Msg) {
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	var req partsList
	var page agents.Page
	err := json.Unmarshal(m.Data, &req)
	if err == nil {
		page, err = h.listParts(ctx, req.Query, req.Parts)
	}
	resp := nats.NewMsg(m.Reply)
	if err == nil {
		if resp.Data, err = json.Marshal(page); err == nil {
			if err := m.RespondMsg(resp); err != nil {
				h.logger.Warn("respond to a node listing", "err", err)
			}
			return
		}
	}
	setErrorHeaders(resp, err)
	if err := m.RespondMsg(resp); err != nil {
		h.logger.Warn("respond to a node listing", "err", err)
	}
}

// listParts is q over the agents of parts, from this node's views, once
// each of parts is this node's and its views caught it up (its recovery
// started). A partition not this node's is a retryable 503.
func (h *Host) listParts(ctx context.Context, q agents.Query, parts []int) (agents.Page, error) {
	keep := map[int]bool{}
	for _, p := range parts {
		switch owned, err := h.awaitPartition(ctx, p); {
		case !owned:
			return agents.Page{}, ErrUnavailable.Wrapf("node %s does not own partition %d now", h.own.Node(), p).WithCause(eventlog.ErrNotOwner)
		case err != nil:
			return agents.Page{}, err
		}
		keep[p] = true
	}
	q.Keep = func(agent string) bool { return keep[h.partitionOf(agent)] }
	return h.listHere(ctx, q)
}

// listOwners is List of a node with owned views: the owners' pages,
// merged.
func (h *Host) listOwners(ctx context.Context, q agents.Query) (agents.Page, error) {
	limit := q.Limit
	switch {
	case limit == 0:
		limit = agents.DefaultLimit
	case limit < 0 || limit > agents.MaxLimit:
		return agents.Page{}, ErrBadRequest.Wrapf("limit %d, want 1 to %d", limit, agents.MaxLimit)
	}
	if q.Cursor != "" {
		if _, err := agents.DecodeCursor(q.Cursor); err != nil {
			return agents.Page{}, fmt.Errorf("%w: %w", ErrBadRequest, err)
		}
	}
	deadline := time.Now().Add(handoffWait)
	for {
		page, err := h.listOwnersOnce(ctx, q, limit)
		if err == nil || !retryable(err) {
			return page, err
		}
		if time.Now().After(deadline) {
			return agents.Page{}, ErrUnavailable.Wrapf("the listing found no owner of every partition within %s: %v", handoffWait, err)
		}
		t := time.NewTimer(routeBackoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return agents.Page{}, ErrUnavailable.Wrapf("%w (waiting for the partitions' owners)", ctx.Err())
		}
	}
}

// listOwnersOnce asks each owner of the partitions as this node sees them
// now; an error is retryable when a partition had no owner.
func (h *Host) listOwnersOnce(ctx context.Context, q agents.Query, limit int) (agents.Page, error) {
	me, live := h.own.Node(), h.own.Nodes()
	byNode := map[string][]int{}
	for p := range h.own.Partitions() {
		if _, _, ok := h.own.Owned(p); ok {
			byNode[me] = append(byNode[me], p)
			continue
		}
		owner, known := h.own.Owner(p)
		if !known || owner.Node == me || !slices.Contains(live, owner.Node) {
			return agents.Page{}, ErrUnavailable.Wrapf("partition %d has no owner now", p).WithCause(eventlog.ErrNotOwner)
		}
		byNode[owner.Node] = append(byNode[owner.Node], p)
	}
	type answer struct {
		page agents.Page
		err  error
	}
	answers := make(chan answer, len(byNode))
	for node, parts := range byNode {
		go func() {
			var a answer
			if node == me {
				a.page, a.err = h.listParts(ctx, q, parts)
			} else {
				a.page, a.err = h.askList(ctx, node, q, parts)
			}
			answers <- a
		}()
	}
	var all []agents.Entry
	more := false
	var errs []error
	for range byNode {
		a := <-answers
		if a.err != nil {
			errs = append(errs, a.err)
			continue
		}
		all = append(all, a.page.Agents...)
		more = more || a.page.Next != ""
	}
	if len(errs) > 0 {
		// Retryable only if every error is: one node's 400 is the answer.
		for _, err := range errs {
			if !retryable(err) {
				return agents.Page{}, err
			}
		}
		return agents.Page{}, errs[0]
	}
	slices.SortFunc(all, func(a, b agents.Entry) int { return strings.Compare(a.Agent, b.Agent) })
	page := agents.Page{Agents: all}
	if len(all) > limit {
		page.Agents, more = all[:limit], true
	}
	if page.Agents == nil {
		page.Agents = []agents.Entry{}
	}
	if more {
		page.Next = agents.EncodeCursor(page.Agents[len(page.Agents)-1].Agent)
	}
	return page, nil
}

// askList asks node for q over the agents of parts.
func (h *Host) askList(ctx context.Context, node string, q agents.Query, parts []int) (agents.Page, error) {
	data, err := json.Marshal(partsList{Query: q, Parts: parts})
	if err != nil {
		return agents.Page{}, err
	}
	resp, err := h.deps.Conn.RequestWithContext(ctx, h.nodeListSubject(node), data)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return agents.Page{}, fmt.Errorf("list on node %s: %w", node, err)
		}
		return agents.Page{}, ErrTimeout.Wrapf("node %s, listing its partitions: %v", node, err)
	}
	if err := remoteError(node, resp); err != nil {
		return agents.Page{}, err
	}
	var page agents.Page
	if err := json.Unmarshal(resp.Data, &page); err != nil {
		return agents.Page{}, fmt.Errorf("list on node %s: %w", node, err)
	}
	return page, nil
}

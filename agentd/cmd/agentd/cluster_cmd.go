package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/eventlog"
)

// showCluster prints the answer of <prefix>.cluster: the node that
// answered, its nodes and partitions, the record format, and the streams;
// asJSON prints the document as it came.
func showCluster(ctx context.Context, nc *nats.Conn, asJSON bool, stdout io.Writer) error {
	subject := host.ClusterSubject(eventlog.DefaultPrefix)
	msg, err := requestAgentd(ctx, nc, subject, nil)
	if err != nil {
		return err
	}
	if asJSON {
		_, err := fmt.Fprintf(stdout, "%s\n", msg.Data)
		return err
	}
	var info agentd.ClusterInfo
	if err := json.Unmarshal(msg.Data, &info); err != nil {
		return fmt.Errorf("decode the cluster's answer: %w", err)
	}
	name := info.Cluster
	if name == "" {
		name = "(one node)"
	}
	fmt.Fprintf(stdout, "cluster %s, answered by %s: %d partitions, lease TTL %s\n", name, info.Node, info.Partitions, info.LeaseTTL)
	if info.Shards > 0 {
		fmt.Fprintf(stdout, "%d stream shards: partition p in shard p mod %d\n", info.Shards, info.Shards)
	}
	if f := info.Format; f != nil {
		fmt.Fprintf(stdout, "record format %d active; every live node reads up to %d\n", f.Active, f.Ready)
	}
	fmt.Fprintln(stdout)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	// LEADS: how many of the streams listed each node leads (a sharded
	// cluster spreads its shards' leaders over the nodes).
	leads := map[string]int{}
	for _, s := range info.Streams {
		if s.Leader != "" {
			leads[s.Leader]++
		}
	}
	fmt.Fprintln(tw, "NODE\tLIVE\tOWNS\tREADS FORMAT\tLEADS")
	for _, n := range info.Nodes {
		reads := "-"
		if info.Format != nil {
			if r, ok := info.Format.Nodes[n.Name]; ok {
				reads = fmt.Sprint(r)
			}
		}
		fmt.Fprintf(tw, "%s\t%v\t%d\t%s\t%d\n", n.Name, n.Live, n.Owns, reads, leads[n.Name])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	tw = tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STREAM\tLEADER\tREPLICAS\tMESSAGES\tBYTES\tLAST SEQ")
	sort.Slice(info.Streams, func(i, j int) bool { return info.Streams[i].Name < info.Streams[j].Name })
	for _, s := range info.Streams {
		if s.Error != "" {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t%s\n", s.Name, s.Error)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\n", s.Name, dash(s.Leader), s.Replicas, s.Messages, s.Bytes, s.LastSeq)
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

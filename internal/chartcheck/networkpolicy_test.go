package chartcheck_test

import (
	"maps"
	"slices"
	"testing"
)

type networkPolicy struct {
	Spec struct {
		PodSelector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"podSelector"`
		PolicyTypes []string `yaml:"policyTypes"`
		Ingress     []struct {
			Ports []struct{ Port int }
			From  []map[string]any
		}
	}
}

// TestNetworkPolicy: off by default; on, clients (any, or the peers given)
// reach HTTP and NATS, the metrics port its own peers (any by default), and
// only the release's pods reach the route port.
func TestNetworkPolicy(t *testing.T) {
	helm := helmBinary(t)
	if n := len(render(t, helm, "auth.generateSecret=true").byKind("NetworkPolicy")); n != 0 {
		t.Errorf("%d NetworkPolicies by default, want none", n)
	}
	cases := []struct {
		name        string
		set         []string
		clientPorts []int
		routes      bool
		clients     int // peers in the client rule's from; 0: any source
	}{
		{name: "cluster", clientPorts: []int{8080, 4222}, routes: true},
		{name: "one replica", set: []string{"replicaCount=1"}, clientPorts: []int{8080, 4222}},
		{name: "external NATS", set: []string{"externalNats.enabled=true", "externalNats.url=nats://nats:4222"}, clientPorts: []int{8080}},
		{name: "clients", set: []string{"networkPolicy.clients[0].namespaceSelector.matchLabels.team=ai"},
			clientPorts: []int{8080, 4222}, routes: true, clients: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := render(t, helm, append([]string{"auth.generateSecret=true", "networkPolicy.enabled=true"}, tc.set...)...)
			var np networkPolicy
			m.one(t, "NetworkPolicy", &np)
			var sts statefulSet
			m.one(t, "StatefulSet", &sts)
			selector := sts.Spec.Selector.MatchLabels
			if !maps.Equal(np.Spec.PodSelector.MatchLabels, selector) || !slices.Equal(np.Spec.PolicyTypes, []string{"Ingress"}) {
				t.Errorf("policy selects %v for %v, want the StatefulSet's pods %v for Ingress", np.Spec.PodSelector.MatchLabels, np.Spec.PolicyTypes, selector)
			}
			want := 2 // clients, metrics
			if tc.routes {
				want = 3
			}
			if len(np.Spec.Ingress) != want {
				t.Fatalf("%d ingress rules, want %d: %+v", len(np.Spec.Ingress), want, np.Spec.Ingress)
			}
			client := np.Spec.Ingress[0]
			var ports []int
			for _, p := range client.Ports {
				ports = append(ports, p.Port)
			}
			if !slices.Equal(ports, tc.clientPorts) || len(client.From) != tc.clients {
				t.Errorf("client rule: ports %v from %v, want ports %v from %d peers", ports, client.From, tc.clientPorts, tc.clients)
			}
			metrics := np.Spec.Ingress[1]
			if len(metrics.Ports) != 1 || metrics.Ports[0].Port != 9464 || len(metrics.From) != 0 {
				t.Errorf("metrics rule %+v, want port 9464 from any source", metrics)
			}
			if !tc.routes {
				return
			}
			routes := np.Spec.Ingress[2]
			if len(routes.Ports) != 1 || routes.Ports[0].Port != 6222 || len(routes.From) != 1 {
				t.Fatalf("route rule %+v, want port 6222 from the release's pods", routes)
			}
			peer, _ := routes.From[0]["podSelector"].(map[string]any)
			labels, _ := peer["matchLabels"].(map[string]any)
			got := map[string]string{}
			for k, v := range labels {
				got[k], _ = v.(string)
			}
			if len(routes.From[0]) != 1 || !maps.Equal(got, selector) {
				t.Errorf("route rule from %v, want only pods with %v", routes.From, selector)
			}
		})
	}
}

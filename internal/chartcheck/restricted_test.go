package chartcheck_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

// TestRestricted renders the chart and checks its pods against the Pod
// Security Standards' restricted profile (baseline included), and the
// chart's own defaults: no service account token, resources sized from the
// JetStream limits, zone spread. Cases with want set must fail those
// checks, which shows the checks can fail.
func TestRestricted(t *testing.T) {
	helm := helmBinary(t)
	cases := []struct {
		name string
		set  []string
		want []string // violations expected, as substrings; none: clean
	}{
		{name: "default"},
		{name: "one replica", set: []string{"replicaCount=1"}},
		{name: "no persistence", set: []string{"persistence.enabled=false"}},
		{name: "external NATS", set: []string{"externalNats.enabled=true", "externalNats.url=nats://nats:4222"}},
		{name: "auth off", set: []string{"auth.enabled=false"}},
		{name: "no seccomp profile", set: []string{"podSecurityContext.seccompProfile=null", "securityContext.seccompProfile=null"},
			want: []string{"seccompProfile"}},
		{name: "privilege escalation", set: []string{"securityContext.allowPrivilegeEscalation=true"},
			want: []string{"allowPrivilegeEscalation"}},
		{name: "root", set: []string{"podSecurityContext.runAsUser=0", "podSecurityContext.runAsNonRoot=false", "securityContext.runAsNonRoot=false"},
			want: []string{"runAsNonRoot", "runAsUser 0"}},
		{name: "token mounted", set: []string{"serviceAccount.automountServiceAccountToken=true"},
			want: []string{"automountServiceAccountToken"}},
		{name: "capabilities kept", set: []string{"securityContext.capabilities.drop=null"},
			want: []string{"capabilities"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := render(t, helm, append([]string{"auth.generateSecret=true"}, tc.set...)...)
			var sts statefulSet
			m.one(t, "StatefulSet", &sts)
			got := restrictedViolations(sts.Spec.Template.Spec)
			if sas := m.byKind("ServiceAccount"); len(sas) == 1 {
				var sa struct {
					AutomountServiceAccountToken *bool `yaml:"automountServiceAccountToken"`
				}
				sas[0].Decode(&sa)
				if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
					got = append(got, "ServiceAccount automountServiceAccountToken is not false")
				}
			}
			if len(tc.want) == 0 {
				for _, v := range got {
					t.Error(v)
				}
				return
			}
			for _, w := range tc.want {
				if !slices.ContainsFunc(got, func(v string) bool { return strings.Contains(v, w) }) {
					t.Errorf("no violation mentions %q; got %q", w, got)
				}
			}
		})
	}
}

// TestResources: the default resources follow agentd.jetstream.maxMemory
// (and maxStore without persistence); a resources value replaces them.
func TestResources(t *testing.T) {
	helm := helmBinary(t)
	cases := []struct {
		name       string
		set        []string
		requests   map[string]string
		limits     map[string]string
		noZoneRule bool
	}{
		{name: "default",
			requests: map[string]string{"cpu": "250m", "memory": "512Mi", "ephemeral-storage": "64Mi"},
			limits:   map[string]string{"memory": "1Gi", "ephemeral-storage": "1Gi"}},
		{name: "1GiB memory store", set: []string{"agentd.jetstream.maxMemory=1GiB"},
			requests: map[string]string{"cpu": "250m", "memory": "1280Mi", "ephemeral-storage": "64Mi"},
			limits:   map[string]string{"memory": "1792Mi", "ephemeral-storage": "1Gi"}},
		{name: "external NATS", set: []string{"externalNats.enabled=true", "externalNats.url=nats://nats:4222"},
			requests: map[string]string{"cpu": "250m", "memory": "256Mi", "ephemeral-storage": "64Mi"},
			limits:   map[string]string{"memory": "768Mi", "ephemeral-storage": "1Gi"}},
		{name: "no persistence", set: []string{"persistence.enabled=false", "agentd.jetstream.maxStore=1G"},
			requests: map[string]string{"cpu": "250m", "memory": "512Mi", "ephemeral-storage": "1088Mi"},
			limits:   map[string]string{"memory": "1Gi"}},
		{name: "set", set: []string{"resources.requests.cpu=2", "resources.requests.memory=4Gi", "resources.limits.memory=4Gi"},
			requests: map[string]string{"cpu": "2", "memory": "4Gi"},
			limits:   map[string]string{"memory": "4Gi"}},
		{name: "one replica", set: []string{"replicaCount=1"}, noZoneRule: true,
			requests: map[string]string{"cpu": "250m", "memory": "512Mi", "ephemeral-storage": "64Mi"},
			limits:   map[string]string{"memory": "1Gi", "ephemeral-storage": "1Gi"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := render(t, helm, append([]string{"auth.generateSecret=true"}, tc.set...)...)
			var sts statefulSet
			m.one(t, "StatefulSet", &sts)
			r := sts.Spec.Template.Spec.Containers[0].Resources
			if !maps.Equal(r.Requests, tc.requests) || !maps.Equal(r.Limits, tc.limits) {
				t.Errorf("resources = %v / %v, want requests %v limits %v", r.Requests, r.Limits, tc.requests, tc.limits)
			}
			spread := sts.Spec.Template.Spec.TopologySpreadConstraints
			if tc.noZoneRule {
				if len(spread) != 0 {
					t.Errorf("topologySpreadConstraints %+v for one pod, want none", spread)
				}
				return
			}
			if len(spread) != 1 || spread[0].TopologyKey != "topology.kubernetes.io/zone" || spread[0].WhenUnsatisfiable != "ScheduleAnyway" ||
				spread[0].MaxSkew != 1 || !maps.Equal(spread[0].LabelSelector.MatchLabels, sts.Spec.Selector.MatchLabels) {
				t.Errorf("topologySpreadConstraints %+v, want one soft zone spread over the StatefulSet's pods", spread)
			}
		})
	}
}

// allowedVolumes are the volume types the restricted profile allows.
var allowedVolumes = []string{"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}

// restrictedViolations checks a pod spec against the restricted profile of
// the Pod Security Standards (latest), baseline included, and the chart's
// own rules, and returns what it violates.
func restrictedViolations(pod podSpec) []string {
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	if pod.HostNetwork || pod.HostPID || pod.HostIPC {
		bad("host namespaces: hostNetwork %v hostPID %v hostIPC %v", pod.HostNetwork, pod.HostPID, pod.HostIPC)
	}
	for _, v := range pod.Volumes {
		for typ := range v.Source {
			if typ != "name" && !slices.Contains(allowedVolumes, typ) {
				bad("volume %s: type %s is not allowed", v.Name, typ)
			}
		}
	}
	psc := pod.SecurityContext
	for _, s := range psc.Sysctls {
		bad("sysctl %s", s.Name)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		bad("pod automountServiceAccountToken is not false: agentd does not call the Kubernetes API")
	}
	for _, c := range append(pod.InitContainers, pod.Containers...) {
		sc := c.SecurityContext
		if sc.Privileged != nil && *sc.Privileged {
			bad("container %s: privileged", c.Name)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			bad("container %s: allowPrivilegeEscalation is not false", c.Name)
		}
		if !slices.Contains(sc.Capabilities.Drop, "ALL") {
			bad("container %s: capabilities drop %v, want ALL", c.Name, sc.Capabilities.Drop)
		}
		for _, a := range sc.Capabilities.Add {
			if a != "NET_BIND_SERVICE" {
				bad("container %s: capabilities add %s", c.Name, a)
			}
		}
		nonRoot := sc.RunAsNonRoot
		if nonRoot == nil {
			nonRoot = psc.RunAsNonRoot
		}
		if nonRoot == nil || !*nonRoot {
			bad("container %s: runAsNonRoot is not true", c.Name)
		}
		for _, u := range []*int64{psc.RunAsUser, sc.RunAsUser} {
			if u != nil && *u == 0 {
				bad("container %s: runAsUser 0", c.Name)
			}
		}
		seccomp := sc.SeccompProfile
		if seccomp == nil {
			seccomp = psc.SeccompProfile
		}
		if seccomp == nil || (seccomp.Type != "RuntimeDefault" && seccomp.Type != "Localhost") {
			bad("container %s: seccompProfile %+v, want RuntimeDefault or Localhost", c.Name, seccomp)
		}
		if sc.ProcMount != "" && sc.ProcMount != "Default" {
			bad("container %s: procMount %s", c.Name, sc.ProcMount)
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			bad("container %s: readOnlyRootFilesystem is not true", c.Name)
		}
		for _, p := range c.Ports {
			if p.HostPort != 0 {
				bad("container %s: hostPort %d", c.Name, p.HostPort)
			}
		}
		for _, k := range []string{"cpu", "memory"} {
			if c.Resources.Requests[k] == "" {
				bad("container %s: no %s request", c.Name, k)
			}
		}
		if c.Resources.Limits["memory"] == "" {
			bad("container %s: no memory limit", c.Name)
		}
	}
	return out
}

type statefulSet struct {
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		}
		Template struct {
			Spec podSpec
		}
	}
}

type securityContext struct {
	Privileged               *bool           `yaml:"privileged"`
	AllowPrivilegeEscalation *bool           `yaml:"allowPrivilegeEscalation"`
	ReadOnlyRootFilesystem   *bool           `yaml:"readOnlyRootFilesystem"`
	RunAsNonRoot             *bool           `yaml:"runAsNonRoot"`
	RunAsUser                *int64          `yaml:"runAsUser"`
	SeccompProfile           *seccompProfile `yaml:"seccompProfile"`
	ProcMount                string          `yaml:"procMount"`
	Capabilities             struct {
		Add  []string
		Drop []string
	}
	Sysctls []struct{ Name string }
}

type seccompProfile struct {
	Type string
}

type container struct {
	Name            string
	SecurityContext securityContext `yaml:"securityContext"`
	Ports           []struct {
		HostPort int `yaml:"hostPort"`
	}
	Resources struct {
		Requests map[string]string
		Limits   map[string]string
	}
}

type podSpec struct {
	HostNetwork                  bool            `yaml:"hostNetwork"`
	HostPID                      bool            `yaml:"hostPID"`
	HostIPC                      bool            `yaml:"hostIPC"`
	AutomountServiceAccountToken *bool           `yaml:"automountServiceAccountToken"`
	SecurityContext              securityContext `yaml:"securityContext"`
	InitContainers               []container     `yaml:"initContainers"`
	Containers                   []container
	Volumes                      []volume
	TopologySpreadConstraints    []struct {
		MaxSkew           int    `yaml:"maxSkew"`
		TopologyKey       string `yaml:"topologyKey"`
		WhenUnsatisfiable string `yaml:"whenUnsatisfiable"`
		LabelSelector     struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"labelSelector"`
	} `yaml:"topologySpreadConstraints"`
}

// volume is a pod volume: its name and its source, keyed by type.
type volume struct {
	Name   string
	Source map[string]any `yaml:",inline"`
}

package chartcheck_test

import (
	"encoding/base64"
	"strings"
	"testing"
)

type secretManifest struct {
	Metadata struct {
		Name        string
		Annotations map[string]string
	}
	Data map[string]string
}

// TestAuthSecret: helm template (no cluster to look the Secret up in, as
// under Argo CD) refuses to render a random secret unless
// auth.generateSecret acknowledges it; auth.existingSecret renders none,
// and the same output every time.
func TestAuthSecret(t *testing.T) {
	helm := helmBinary(t)

	args := templateArgs()
	_, stderr, err := helmRun(helm, args...)
	if err == nil {
		t.Fatal("helm template with the default values rendered a random auth secret")
	}
	for _, w := range []string{"auth.existingSecret", "auth.generateSecret=true", "Secret forever-auth", "rotate"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("helm template's error lacks %q:\n%s", w, stderr)
		}
	}

	// helm lint renders with no cluster too, but its output is never
	// applied: it reports nothing that reads as a failure (lint turns a
	// template's fail into an "[INFO] Fail:" line and passes).
	out, stderr, err := helmRun(helm, "lint", chartDir)
	if err != nil || strings.Contains(out+stderr, "Fail") {
		t.Errorf("helm lint with the default values: %v\n%s%s", err, out, stderr)
	}

	m := render(t, helm, "auth.generateSecret=true")
	var s secretManifest
	m.one(t, "Secret", &s)
	secret, err := base64.StdEncoding.DecodeString(s.Data["secret"])
	if s.Metadata.Name != "forever-auth" || err != nil || len(secret) < 32 || s.Metadata.Annotations["helm.sh/resource-policy"] != "keep" {
		t.Errorf("generated Secret %+v (%d bytes, %v), want forever-auth, at least 32 bytes, kept on uninstall", s.Metadata, len(secret), err)
	}

	for _, set := range [][]string{
		{"auth.existingSecret=forever-auth-sealed"},
		{"auth.existingSecret=forever-auth-sealed", "auth.existingSecretKey=key"},
		{"auth.enabled=false"},
		{"externalNats.enabled=true", "externalNats.url=nats://nats:4222"},
	} {
		args := templateArgs(set...)
		first, stderr, err := helmRun(helm, args...)
		if err != nil {
			t.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr)
			continue
		}
		if again, _, _ := helmRun(helm, args...); again != first {
			t.Errorf("helm %s: two renders differ", strings.Join(args, " "))
		}
		m, err := parseManifests(first)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(m.byKind("Secret")); n != 0 {
			t.Errorf("%v: %d Secrets rendered, want none", set, n)
		}
		var sts struct {
			Spec struct {
				Template struct {
					Spec struct {
						Volumes []struct {
							Name   string
							Secret *struct {
								SecretName string `yaml:"secretName"`
							}
						}
						Containers []struct {
							Env []struct{ Name, Value string }
						}
					}
				}
			}
		}
		m.one(t, "StatefulSet", &sts)
		if !strings.HasPrefix(set[0], "auth.existingSecret") {
			continue
		}
		var mounted, file string
		for _, v := range sts.Spec.Template.Spec.Volumes {
			if v.Name == "auth" && v.Secret != nil {
				mounted = v.Secret.SecretName
			}
		}
		for _, e := range sts.Spec.Template.Spec.Containers[0].Env {
			if e.Name == "FOREVER_AUTH_SECRET_FILE" {
				file = e.Value
			}
		}
		key := "secret"
		if len(set) > 1 {
			key = "key"
		}
		if mounted != "forever-auth-sealed" || file != "/etc/forever/auth/"+key {
			t.Errorf("%v: pods mount Secret %q and read %q", set, mounted, file)
		}
	}
}

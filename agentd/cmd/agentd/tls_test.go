package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/internal/waitfor"
)

// testCA is a CA that signs loopback certificates for TLS tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "forever test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue writes a certificate for 127.0.0.1 and localhost with serial
// number serial, and its key, to certFile and keyFile.
func (ca *testCA) issue(t *testing.T, serial int64, certFile, keyFile string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "agentd"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	// Written through a rename, as cert-manager and friends do.
	for file, data := range map[string][]byte{
		certFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyFile:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}),
	} {
		if err := os.WriteFile(file+".tmp", data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(file+".tmp", file); err != nil {
			t.Fatal(err)
		}
	}
}

// testBinaryTLS: with --tls-cert, HTTP and NATS clients must use TLS and
// see the certificate; SIGHUP swaps in a renewed one for new connections;
// agentd's CLI reaches it with --tls-ca.
func testBinaryTLS(t *testing.T, bin string) {
	dir := t.TempDir()
	ca := newTestCA(t)
	caFile, certFile, keyFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(caFile, ca.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	ca.issue(t, 100, certFile, keyFile)
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true}}
	serialOf := func(resp *http.Response) int64 { return resp.TLS.PeerCertificates[0].SerialNumber.Int64() }

	httpAddr, natsAddr := agentdtest.FreeAddr(t), agentdtest.FreeAddr(t)
	p := &agentdProc{out: &agentdtest.SyncBuffer{}, exited: make(chan error, 1)}
	p.cmd = exec.Command(bin, "--data", filepath.Join(dir, "data"), "--http", httpAddr, "--nats-listen", natsAddr,
		"--tls-cert", certFile, "--tls-key", keyFile, "--tls-ca", caFile, "--local-rate", "-1")
	p.cmd.Env = os.Environ()
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(p.kill)
	var resp *http.Response
	waitfor.Within(t, 60*time.Second, func() error {
		var err error
		if resp, err = client.Get("https://" + httpAddr + "/readyz"); err == nil && resp.StatusCode == 200 {
			resp.Body.Close()
			return nil
		}
		return fmt.Errorf("ready over https: %v\n%s", err, p.out.String())
	})
	if serialOf(resp) != 100 {
		t.Fatalf("serial %d", serialOf(resp))
	}
	if r, err := http.Get("http://" + httpAddr + "/readyz"); err == nil {
		r.Body.Close()
		if r.StatusCode != http.StatusBadRequest {
			t.Fatalf("plain HTTP: %d", r.StatusCode)
		}
	}
	if nc, err := nats.Connect("nats://" + natsAddr); err == nil {
		nc.Close()
		t.Fatal("a NATS connection without TLS was accepted")
	}
	natsSerial := func() int64 {
		t.Helper()
		nc, err := nats.Connect("tls://"+natsAddr, nats.RootCAs(caFile))
		if err != nil {
			t.Fatalf("NATS over TLS: %v", err)
		}
		defer nc.Close()
		st, err := nc.TLSConnectionState()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nc.Request("forever.cmd.tls.status", nil, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		return st.PeerCertificates[0].SerialNumber.Int64()
	}
	if s := natsSerial(); s != 100 {
		t.Fatalf("NATS serial %d", s)
	}
	out, err := exec.Command(bin, "chat", "tls", "hello over tls", "--nats-url", "tls://"+natsAddr, "--tls-ca", caFile).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "hello over tls") {
		t.Fatalf("agentd chat over TLS: %v %s", err, out)
	}

	// A renewed certificate: SIGHUP, and new connections get it. A broken
	// one is refused and the renewed one stays.
	ca.issue(t, 200, certFile, keyFile)
	p.cmd.Process.Signal(syscall.SIGHUP)
	waitfor.NoError(t, func() error {
		resp, err := client.Get("https://" + httpAddr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if serialOf(resp) == 200 {
				return nil
			}
		}
		return fmt.Errorf("the new certificate after SIGHUP:\n%s", p.out.String())
	})
	if s := natsSerial(); s != 200 {
		t.Fatalf("NATS serial after SIGHUP %d", s)
	}
	if err := os.WriteFile(keyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	p.cmd.Process.Signal(syscall.SIGHUP)
	waitfor.True(t, "a reload failure in the log", func() bool { return strings.Contains(p.out.String(), "tls reload failed") })
	if strings.Contains(p.out.String(), "not a key") {
		t.Fatal("the key file's content was logged")
	}
	if s := natsSerial(); s != 200 {
		t.Fatalf("NATS serial after a failed reload %d", s)
	}
}

package agentd_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/internal/waitfor"
)

// writeSelfSigned writes a self-signed certificate for 127.0.0.1 valid
// until notAfter, and its key, under dir.
func writeSelfSigned(t *testing.T, dir string, notAfter time.Time) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "agentd"},
		NotBefore: notAfter.Add(-48 * time.Hour), NotAfter: notAfter,
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// TestReadyzNamesAnExpiredCertificate: a TLS certificate past its NotAfter
// is listed under /readyz's degraded (the node still serves: a restart
// would not help, a renewed certificate and SIGHUP do), with the metrics
// forever_agentd_degraded{reason="tls_expired"} and the expiry time.
func TestReadyzNamesAnExpiredCertificate(t *testing.T) {
	cfg := agentdtest.Config(t)
	expired := time.Now().Add(-time.Hour).Truncate(time.Second)
	cfg.TLSCert, cfg.TLSKey = writeSelfSigned(t, t.TempDir(), expired)
	d, err := agentd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	agentdtest.Start(t, d)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	get := func(path string) (int, string) {
		t.Helper()
		var code int
		var body string
		waitfor.NoError(t, func() error {
			resp, err := client.Get("https://" + d.HTTPAddr() + path)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if code, body = resp.StatusCode, string(b); code != http.StatusOK {
				return fmt.Errorf("200 from %s: %d %s", path, code, body)
			}
			return nil
		})
		return code, body
	}
	code, body := get("/readyz")
	var h agentd.Health
	if err := json.Unmarshal([]byte(body), &h); err != nil || code != http.StatusOK ||
		len(h.Degraded) != 1 || !strings.Contains(h.Degraded[0], "TLS certificate") || !strings.Contains(h.Degraded[0], "expired") {
		t.Errorf("/readyz with an expired certificate: %d %s, want 200 with it under degraded", code, body)
	}
	_, body = get("/metrics")
	for _, want := range []string{
		`forever_agentd_degraded{reason="tls_expired"} 1`,
		`forever_agentd_degraded{reason="store_full"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, grepLines(body, "forever_agentd"))
		}
	}
	var v float64
	for _, l := range strings.Split(body, "\n") {
		if s, ok := strings.CutPrefix(l, "forever_agentd_tls_cert_not_after_seconds "); ok {
			v, _ = strconv.ParseFloat(s, 64)
		}
	}
	if int64(v) != expired.Unix() {
		t.Errorf("forever_agentd_tls_cert_not_after_seconds = %v, want %d", v, expired.Unix())
	}
}

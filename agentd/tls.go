package agentd

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// certs holds the TLS certificate (--tls-cert, --tls-key) and CA
// (--tls-ca) that HTTP, the embedded server's client port and its routes
// present and verify with. Reload re-reads the certificate and key (on
// SIGHUP), so new connections get the new certificate without a restart;
// the CA is read once.
type certs struct {
	certFile, keyFile string
	pool              *x509.CertPool // nil without --tls-ca

	mu   sync.RWMutex
	cert *tls.Certificate
}

// loadCerts reads the files named by cfg; nil without --tls-cert.
func loadCerts(cfg *Config) (*certs, error) {
	if cfg.TLSCert == "" {
		return nil, nil
	}
	c := &certs{certFile: cfg.TLSCert, keyFile: cfg.TLSKey}
	if err := c.Reload(); err != nil {
		return nil, configErrorf("tls-cert", "%v", err)
	}
	if cfg.TLSCA != "" {
		pem, err := os.ReadFile(cfg.TLSCA)
		if err != nil {
			return nil, configErrorf("tls-ca", "tls ca: %v", err)
		}
		c.pool = x509.NewCertPool()
		if !c.pool.AppendCertsFromPEM(pem) {
			return nil, configErrorf("tls-ca", "tls ca %s holds no PEM certificate", cfg.TLSCA)
		}
	}
	return c, nil
}

// Reload reads the certificate and key again; on an error the old pair
// stays in use.
func (c *certs) Reload() error {
	pair, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		// The error names the files, never their contents.
		return fmt.Errorf("tls certificate %s and key %s: %w", c.certFile, c.keyFile, err)
	}
	c.mu.Lock()
	c.cert = &pair
	c.mu.Unlock()
	return nil
}

// notAfter returns when the current certificate expires (zero when it
// cannot be read).
func (c *certs) notAfter() time.Time {
	cert := c.current()
	if cert == nil || cert.Leaf == nil {
		return time.Time{}
	}
	return cert.Leaf.NotAfter
}

func (c *certs) current() *tls.Certificate {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.cert
}

// serverConfig is for HTTPS and NATS clients: the current certificate;
// clients are not asked for one.
func (c *certs) serverConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return c.current(), nil
		},
	}
}

// routeConfig is for the cluster's routes, mutual TLS: each node presents
// the current certificate and verifies its peer's against the CA, both
// when it accepts a route and when it dials one.
func (c *certs) routeConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return c.current(), nil
		},
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return c.current(), nil
		},
		ClientAuth: tls.RequireAndVerifyClientCert,
		ClientCAs:  c.pool,
		RootCAs:    c.pool,
	}
}

// validateTLS checks the TLS flags.
func (c *Config) validateTLS() error {
	switch {
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return configErrorf("tls-key", "--tls-cert and --tls-key go together")
	case c.TLSCA != "" && c.TLSCert == "" && c.NATSURL == "":
		return configErrorf("tls-ca", "--tls-ca needs --tls-cert (or --nats-url, to verify that server)")
	case c.TLSCert != "" && c.clustered() && c.TLSCA == "":
		return configErrorf("tls-ca", "with --tls-cert the cluster's routes use mutual TLS: set --tls-ca to the CA that signed every node's certificate")
	}
	return nil
}

// publicWithoutTLS returns the flags (http, nats-listen, cluster-listen)
// listening on a non-loopback address without --tls-cert: their traffic
// (bearer tokens, chat text, NATS messages) crosses the network in clear.
func (c *Config) publicWithoutTLS() []string {
	if c.TLSCert != "" || c.Tenant != nil {
		return nil
	}
	var flags []string
	for _, l := range []struct{ flag, addr string }{
		{"http", c.HTTPAddr},
		{"nats-listen", c.embeddedNATSListen()},
		{"cluster-listen", c.ClusterListen},
	} {
		if l.addr != "" && !isLoopback(l.addr) {
			flags = append(flags, "--"+l.flag)
		}
	}
	return flags
}

// warnPlaintext logs a warning when auth is on and a public listener has
// no TLS: credentials protect nothing an eavesdropper can read.
func (d *Daemon) warnPlaintext() {
	if !d.cfg.Auth {
		return
	}
	if flags := d.cfg.publicWithoutTLS(); len(flags) > 0 {
		d.logger.Warn("auth is on but "+strings.Join(flags, ", ")+" listen on a non-loopback address without TLS: "+
			"bearer tokens, chat text and NATS messages cross the network in clear; pass --tls-cert and --tls-key "+
			"(or terminate TLS in front of agentd and keep these ports private)", "listeners", flags)
	}
}

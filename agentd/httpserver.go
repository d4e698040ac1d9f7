package agentd

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of the HTTP server's limits (Config.HTTP*).
const (
	// DefaultHTTPReadHeaderTimeout bounds reading a request's headers (and
	// a TLS handshake).
	DefaultHTTPReadHeaderTimeout = 10 * time.Second
	// DefaultHTTPBodyTimeout bounds reading a request's body, from the
	// end of its headers.
	DefaultHTTPBodyTimeout = 30 * time.Second
	// DefaultHTTPIdleTimeout bounds how long a kept-alive connection waits
	// for its next request.
	DefaultHTTPIdleTimeout = 2 * time.Minute
	// DefaultHTTPMaxConns bounds the HTTP connections open at once.
	DefaultHTTPMaxConns = 4096
)

// refusedConnTimeout bounds the answer to a connection past
// Config.HTTPMaxConns: reading its request (or TLS handshake) and writing
// the 503.
const refusedConnTimeout = 2 * time.Second

// maxRefusing bounds the connections being answered 503 at once; past it
// a refused connection is closed without an answer.
const maxRefusing = 64

// httpMetrics are the HTTP server's connection metrics.
type httpMetrics struct {
	open    prometheus.GaugeFunc
	refused prometheus.Counter
}

// validateHTTP refuses negative HTTP limits.
func (c *Config) validateHTTP() error {
	for _, f := range []struct {
		flag string
		v    int64
	}{
		{"http-read-header-timeout", int64(c.HTTPReadHeaderTimeout)},
		{"http-body-timeout", int64(c.HTTPBodyTimeout)},
		{"http-idle-timeout", int64(c.HTTPIdleTimeout)},
		{"http-max-conns", int64(c.HTTPMaxConns)},
	} {
		if f.v < 0 {
			return configErrorf(f.flag, "%s must not be negative", f.flag)
		}
	}
	return nil
}

// newHTTPServer is agentd's HTTP server around h: headers within
// HTTPReadHeaderTimeout, bodies within HTTPBodyTimeout (bodyDeadline),
// kept-alive connections closed after HTTPIdleTimeout, every response
// with the framing headers (frameHeaders). No write timeout:
// SSE streams and WebSockets last as long as their turn, with keepalives
// of their own.
func (d *Daemon) newHTTPServer(h http.Handler) *http.Server {
	cfg := &d.cfg
	return &http.Server{
		Handler:           frameHeaders(cfg, d.httpFront(bodyDeadline(h, cfg.HTTPBodyTimeout))),
		ReadHeaderTimeout: cfg.HTTPReadHeaderTimeout,
		IdleTimeout:       cfg.HTTPIdleTimeout,
	}
}

// bodyDeadline bounds the reading of a request's body: a request with a
// body gets a read deadline timeout after its headers, cleared once the
// body is read to its end or closed. The deadline is per request kind, not
// the server's ReadTimeout: that would also end the SSE stream a POST
// answers with (the server's background read, which notices a client
// going away, would hit it and cancel the request), and a WebSocket or a
// GET has no body to bound.
func bodyDeadline(h http.Handler, timeout time.Duration) http.Handler {
	if timeout <= 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
			rc := http.NewResponseController(w)
			if rc.SetReadDeadline(time.Now().Add(timeout)) == nil {
				r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
			}
		}
		h.ServeHTTP(w, r)
	})
}

// deadlineBody clears its request's read deadline once it is read to its
// end or closed.
type deadlineBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	cleared atomic.Bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.clear()
	}
	return n, err
}

func (b *deadlineBody) Close() error {
	err := b.ReadCloser.Close()
	b.clear()
	return err
}

func (b *deadlineBody) clear() {
	if b.cleared.CompareAndSwap(false, true) {
		_ = b.rc.SetReadDeadline(time.Time{})
	}
}

// connLimiter is a listener that holds at most max connections open.
// Past it, a connection is answered 503 with Retry-After (over TLS when
// tlsConfig is set) and closed, without reaching the server; but a probe
// (GET /healthz or /readyz) is answered by probes, once, so that idle
// connections from anyone cannot fail a pod's liveness probe.
type connLimiter struct {
	net.Listener
	max       int
	tlsConfig *tls.Config
	probes    http.Handler // nil: probes are refused too
	open      atomic.Int64
	refusing  chan struct{} // a slot per connection being answered 503
	refused   prometheus.Counter
}

// limitConns wraps ln with the HTTPMaxConns bound; probes answers /healthz
// and /readyz past it.
func (d *Daemon) limitConns(ln net.Listener, tlsConfig *tls.Config, probes http.Handler) net.Listener {
	l := &connLimiter{Listener: ln, max: d.cfg.HTTPMaxConns, probes: probes, refusing: make(chan struct{}, maxRefusing)}
	if tlsConfig != nil {
		l.tlsConfig = tlsConfig.Clone()
		l.tlsConfig.NextProtos = []string{"http/1.1"}
	}
	if d.httpm != nil {
		l.refused = d.httpm.refused
		d.httpOpen.Store(&l.open)
	}
	return l
}

func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) <= int64(l.max) {
			return &limitedConn{Conn: c, l: l}, nil
		}
		l.open.Add(-1)
		select {
		case l.refusing <- struct{}{}:
			go func() {
				defer func() { <-l.refusing }()
				l.refuse(c)
			}()
		default:
			l.countRefused()
			c.Close()
		}
	}
}

// refusedBody is the 503 a connection past the bound gets.
const refusedBody = `{"code":503,"error":"agentd: too many HTTP connections open, retry later"}` + "\n"

func (l *connLimiter) countRefused() {
	if l.refused != nil {
		l.refused.Inc()
	}
}

// isProbe reports whether r is a liveness or readiness probe.
func isProbe(r *http.Request) bool {
	return r.Method == http.MethodGet && (r.URL.Path == "/healthz" || r.URL.Path == "/readyz")
}

// refuse reads c's request head (so closing does not reset the
// connection under the client's feet), answers a probe with l.probes and
// anything else 503, and closes c.
func (l *connLimiter) refuse(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(refusedConnTimeout))
	conn := c
	if l.tlsConfig != nil {
		tc := tls.Server(c, l.tlsConfig)
		if tc.Handshake() != nil {
			return
		}
		conn = tc
	}
	br := bufio.NewReaderSize(io.LimitReader(conn, 16<<10), 4096)
	if req, err := http.ReadRequest(br); err == nil && l.probes != nil && isProbe(req) {
		ctx, cancel := context.WithTimeout(context.Background(), refusedConnTimeout)
		defer cancel()
		req.RemoteAddr = c.RemoteAddr().String()
		answerOnce(conn, l.probes, req.WithContext(ctx))
		return
	}
	l.countRefused()
	fmt.Fprintf(conn, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"+
		"Connection: close\r\nContent-Length: %d\r\n\r\n%s", len(refusedBody), refusedBody)
}

// answerOnce serves req with h and writes the answer to conn, closing.
func answerOnce(conn io.Writer, h http.Handler, req *http.Request) {
	w := &onceWriter{header: http.Header{}}
	h.ServeHTTP(w, req)
	if w.code == 0 {
		w.code = http.StatusOK
	}
	resp := &http.Response{StatusCode: w.code, ProtoMajor: 1, ProtoMinor: 1, Header: w.header, Close: true,
		ContentLength: int64(w.body.Len()), Body: io.NopCloser(&w.body), Request: req}
	_ = resp.Write(conn)
}

// onceWriter gathers a probe's answer (a small JSON body).
type onceWriter struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (w *onceWriter) Header() http.Header { return w.header }

func (w *onceWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

func (w *onceWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(b)
}

// limitedConn gives its slot back when closed.
type limitedConn struct {
	net.Conn
	l    *connLimiter
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}

// registerHTTPMetrics registers the HTTP connection metrics.
func (d *Daemon) registerHTTPMetrics(reg prometheus.Registerer) error {
	if d.cfg.Tenant != nil {
		return nil // no listener
	}
	m := &httpMetrics{
		open: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "forever_http_connections_open",
			Help: "HTTP connections open (--http-max-conns bounds them).",
		}, func() float64 {
			if p := d.httpOpen.Load(); p != nil {
				return float64(p.Load())
			}
			return 0
		}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "forever_http_connections_refused_total",
			Help: "HTTP connections answered 503 and closed because --http-max-conns were open (probes answered past it are not counted).",
		}),
	}
	for _, c := range []prometheus.Collector{m.open, m.refused} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("%w: register metrics: %w", ErrConfig, err)
		}
	}
	d.httpm = m
	return nil
}

// httpFlags defines the HTTP server's limits.
func httpFlags(fs *flag.FlagSet, cfg *Config) {
	fs.DurationVar(&cfg.HTTPReadHeaderTimeout, "http-read-header-timeout", cfg.HTTPReadHeaderTimeout,
		"time allowed to read an HTTP request's headers (and a TLS handshake)")
	fs.DurationVar(&cfg.HTTPBodyTimeout, "http-body-timeout", cfg.HTTPBodyTimeout,
		"time allowed to read an HTTP request's body, from the end of its headers; SSE and WebSocket streams are not bounded by it")
	fs.DurationVar(&cfg.HTTPIdleTimeout, "http-idle-timeout", cfg.HTTPIdleTimeout,
		"how long a kept-alive HTTP connection waits for its next request before it is closed")
	fs.IntVar(&cfg.HTTPMaxConns, "http-max-conns", cfg.HTTPMaxConns,
		"HTTP connections open at once; past it a connection is answered 503 with Retry-After and closed, except GET /healthz and /readyz, which are answered")
}

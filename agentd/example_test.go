package agentd_test

import (
	"context"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/forever-agents/forever/agentd"
	"github.com/forever-agents/forever/eventlog"
	"github.com/prometheus/client_golang/prometheus"
)

// A program hosting its own components: a projection that /readyz waits
// for, an HTTP handler, and a background worker.
func ExampleDaemon() {
	cfg, err := agentd.ParseFlags(os.Args[1:], os.Getenv)
	if err != nil {
		log.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	cfg.Registerer, cfg.Gatherer = reg, reg
	d, err := agentd.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	d.OnStart(func(ctx context.Context, deps *agentd.Deps) error {
		pr, err := deps.Log.NewProjector(eventlog.Projection{
			Name: "notes", Version: 1,
			Apply: func(b *eventlog.Batch, e eventlog.Event) error { return b.Set([]byte(e.ID), e.Data) },
		})
		if err != nil {
			return err
		}
		d.HandleFunc("GET /v1/notes/{id}", func(w http.ResponseWriter, r *http.Request) {
			v, err := deps.Log.View("notes")
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			row, err := v.Get([]byte(r.PathValue("id")))
			if err != nil {
				http.NotFound(w, r)
				return
			}
			w.Write(row)
		})
		d.Add("worker", agentd.ComponentFunc(func(ctx context.Context) error {
			<-ctx.Done() // work until shutdown
			return nil
		}))
		return d.AddProjector(pr)
	})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := d.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

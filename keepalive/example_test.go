package keepalive_test

import (
	"context"
	"log"
	"time"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/keepalive"
)

// The host runs one Scheduler per Log; Fire routes a due schedule to its
// agent.
func ExampleScheduler() {
	ctx := context.Background()
	var lg *eventlog.Log // from eventlog.Open with a Dir
	s, err := keepalive.NewScheduler(keepalive.SchedulerConfig{
		Log: lg,
		Fire: func(ctx context.Context, sc keepalive.Schedule) error {
			log.Printf("deliver %s(%s) to %s", sc.Callback, sc.Payload, sc.Agent)
			return nil
		},
		OnError: func(sc keepalive.Schedule, err error) { log.Print(err) },
	})
	if err != nil {
		log.Fatal(err)
	}
	go s.Run(ctx) // catches the view up, then fires due schedules

	sc, err := s.Schedule(ctx, "agent-1", keepalive.Spec{Callback: "remind", Delay: time.Hour})
	if err != nil {
		log.Fatal(err)
	}
	// Same callback, payload and interval: returns the existing schedule.
	_, _ = s.Schedule(ctx, "agent-1", keepalive.Spec{Callback: "poll", Every: 5 * time.Minute})
	_, _ = s.Schedule(ctx, "agent-1", keepalive.Spec{Callback: "report", Cron: "0 9 * * 1-5"})
	existed, err := s.Cancel(ctx, "agent-1", sc.ID)
	log.Print(existed, err)
}

package inboxprom_test

import (
	"context"
	"fmt"
	"log"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/watermill-inbox/inbox"
	"github.com/watermill-inbox/inbox/inboxprom"
)

// The observer as inbox.Config.Observer; here fed by hand to show what it counts.
func ExampleNew() {
	reg := prometheus.NewRegistry() // or prometheus.DefaultRegisterer
	obs, err := inboxprom.New(reg)
	if err != nil {
		log.Fatal(err)
	}
	_ = inbox.Config{Observer: obs} // with Store set, to inbox.New

	ctx := context.Background()
	obs.Observe(ctx, inbox.Observation{Consumer: "billing", Outcome: inbox.OutcomeProcessed})
	obs.Observe(ctx, inbox.Observation{Consumer: "billing", Outcome: inbox.OutcomeDuplicate})
	obs.Observe(ctx, inbox.Observation{Consumer: "billing", Outcome: inbox.OutcomeDuplicate})
	n, err := testutil.GatherAndCount(reg, inboxprom.MessagesTotal)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(n, "series of", inboxprom.MessagesTotal)
	// Output:
	// 2 series of inbox_messages_total
}

package main

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/brokerswitch/brokerswitch/payloads"
)

// entityClockResult is the apply rate of updates to rows that exist, with and without
// GitHub's clock in the payloads, measured in the same run.
type entityClockResult struct {
	// Entities is how many rows of each clocked table the updates change (pull requests,
	// issues, comments): each round sends one event to every one of them.
	Entities int
	// Events is how many updates each run applies, per workload.
	Events int
	// NoClock, Newer and HalfOlder are the apply rates (events/s) per run, in run order:
	// the payloads without their clock field (every row takes the queue-order fallback),
	// each event newer than its row by the clock, and half of the events older than their
	// row (left in the ledger alone by the upsert's WHERE).
	NoClock, Newer, HalfOlder []float64
	// Kept is how many rows of the half-older database still held their setup clock after
	// the last run, of Older rows whose every event was older: the older events wrote
	// nothing, or the figure measured the wrong path.
	Kept, Older int64
}

// entityClockKinds are the updates, one per clocked table with a lifecycle or a refresh:
// the created event that makes the row and the event that changes it.
func entityClockKinds() []entityClockKind {
	return []entityClockKind{
		{"pull_request", "opened", "synchronize", "pull_request", 9_500_000},
		{"issues", "opened", "edited", "issue", 8_500_000},
		{"issue_comment", "created", "edited", "comment", 6_500_000},
	}
}

// entityClockKind is one clocked table's created event and update.
type entityClockKind struct {
	event, create, update, objectKey string
	idBase                           int
}

// phClock stands for the clock field's value in the templates.
const phClock = "BSCLOCKPLACEHOLDER"

// entityClockTemplate is a vendored payload of event and action with placeholders for the
// entity's identity and, if clocked, its updated_at; without, updated_at is removed.
func entityClockTemplate(event, action, objectKey string, clocked bool) []byte {
	ev, err := payloads.Build(event, action, func(p map[string]any) {
		p["action"] = action
		obj, _ := p[objectKey].(map[string]any)
		if obj == nil {
			return
		}
		markIdentity(obj)
		if action == "opened" || action == "synchronize" || action == "edited" {
			if _, ok := obj["state"]; ok {
				obj["state"] = "open"
			}
		}
		if clocked {
			obj["updated_at"] = phClock
		} else {
			delete(obj, "updated_at")
		}
	})
	if err != nil {
		panic(err) // the vendored payloads are part of the build
	}
	return ev.Body
}

// entityClockWorkload builds the events of one workload for a database of n entities per
// kind: setup creates the rows, update(round) changes every one of them once.
type entityClockWorkload struct {
	name     string
	clocked  bool
	setup    func(entity int) time.Time // the clock of entity's row after setup
	update   func(entity, round int) time.Time
	database *gorm.DB
	rates    *[]float64
}

// entityClockEpoch is the clock of the rows at setup; update round r is r minutes later.
func entityClockEpoch() time.Time { return time.Date(2019, 5, 15, 0, 0, 0, 0, time.UTC) }

// entityClockFuture is the setup clock of the rows that every update of the half-older
// workload is older than. Later than every update, yet in the past: a clock beyond now and
// the allowed skew is distrusted, and its event applied as one without a clock.
func entityClockFuture() time.Time { return time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC) }

// runEntityClock applies, in three fresh databases, the same updates to existing pull
// requests, issues and comments, in batches of up to 100 per queue as a window commits
// them, through the ingester (no broker): without the clock in the payloads (before:
// queue order only, the fallback branch of the same statements), each newer than its row,
// and half of them older than their row. The workloads take turns going first.
func runEntityClock(s *figure, events, runs int) entityClockResult {
	const entities = 100
	res := entityClockResult{Entities: entities}
	rounds := max(1, events/(entities*len(entityClockKinds())))
	res.Events = rounds * entities * len(entityClockKinds())
	newer := func(_, round int) time.Time { return entityClockEpoch().Add(time.Duration(round) * time.Minute) }
	workloads := []*entityClockWorkload{
		{name: "no clock (before)", clocked: false, setup: func(int) time.Time { return entityClockEpoch() }, update: newer, rates: &res.NoClock},
		{name: "newer by the clock", clocked: true, setup: func(int) time.Time { return entityClockEpoch() }, update: newer, rates: &res.Newer},
		{name: "half older than the row", clocked: true, setup: func(e int) time.Time {
			if e%2 == 1 {
				return entityClockFuture()
			}
			return entityClockEpoch()
		}, update: newer, rates: &res.HalfOlder},
	}
	type template struct{ create, update []byte }
	templates := map[bool][]template{}
	for _, clocked := range []bool{false, true} {
		for _, k := range entityClockKinds() {
			templates[clocked] = append(templates[clocked], template{
				create: entityClockTemplate(k.event, k.create, k.objectKey, clocked),
				update: entityClockTemplate(k.event, k.update, k.objectKey, clocked),
			})
		}
	}
	build := func(w *entityClockWorkload, round int) []payloads.Event {
		var out []payloads.Event
		for e := range entities {
			for i, k := range entityClockKinds() {
				body, clock, action := templates[w.clocked][i].update, w.update(e, round), k.update
				if round == 0 {
					body, clock, action = templates[w.clocked][i].create, w.setup(e), k.create
				}
				seq := 1_000_000 + e // the same entity in every workload and round
				body = fillIdentity(body, k.objectKey+"_clock", k.idBase, seq)
				body = bytes.ReplaceAll(body, []byte(phClock), []byte(clock.Format(time.RFC3339)))
				out = append(out, payloads.Event{Queue: payloads.QueueFor(k.event), Event: k.event, Action: action,
					DeliveryID: payloads.NewDeliveryID(), Body: body})
			}
		}
		return out
	}
	for _, w := range workloads {
		w.database = ledgerDatabase(s)
		applyCorpus(s, w.database, build(w, 0)) // the rows, and the pool's connections
	}
	round := 1
	for r := 1; r <= runs; r++ {
		// Built before the clock starts, for all three, from the same rounds.
		batches := make([][]payloads.Event, len(workloads))
		for i, w := range workloads {
			for n := range rounds {
				batches[i] = append(batches[i], build(w, round+n)...)
			}
		}
		round += rounds
		order := slices.Clone(workloads)
		for range (r - 1) % len(order) {
			order = append(order[1:], order[0])
		}
		for _, w := range order {
			rate := applyCorpus(s, w.database, batches[slices.Index(workloads, w)])
			s.logf("entity clock: %s run %d: %.0f events/s", w.name, r, rate)
			*w.rates = append(*w.rates, rate)
		}
	}
	last := entityClockEpoch().Add(time.Duration(round-1) * time.Minute)
	var newest int64
	s.check(workloads[1].database.WithContext(context.Background()).
		Raw("SELECT (SELECT count(*) FROM github_pull_requests WHERE entity_clock = ?) + (SELECT count(*) FROM github_issues WHERE entity_clock = ?) + (SELECT count(*) FROM github_comments WHERE entity_clock = ?)", last, last, last).
		Scan(&newest).Error, "rows at the last round's clock")
	if want := int64(entities * len(entityClockKinds())); newest != want {
		s.Fatalf("entity clock: %d of the %d rows hold the last round's clock after the newer updates", newest, want)
	}
	half := workloads[2].database
	res.Older = int64(entities/2) * int64(len(entityClockKinds()))
	for _, table := range []string{"github_pull_requests", "github_issues", "github_comments"} {
		var kept int64
		// table comes from the list above.
		s.check(half.WithContext(context.Background()).Raw("SELECT count(*) FROM "+table+" WHERE entity_clock = ?", entityClockFuture()).
			Scan(&kept).Error, "rows of "+table+" that kept their clock")
		res.Kept += kept
	}
	if res.Kept != res.Older {
		s.Fatalf("entity clock: %d of the %d rows whose events were all older kept their clock", res.Kept, res.Older)
	}
	return res
}

// entityClockRows adds the entity clock figures to the table.
func (r *results) entityClockRows(add func(row), rep *report) {
	c := r.EntityClock
	if c == nil || len(c.NoClock) == 0 {
		return
	}
	before, newer, half := median(c.NoClock), median(c.Newer), median(c.HalfOlder)
	ok := newer >= 0.95*before
	what := fmt.Sprintf("%d existing pull requests, issues and comments each; batches of 100", c.Entities)
	add(row{"Apply rate of updates, payloads without their clock: before (queue order only; " + what + ")",
		fmt.Sprintf("%.0f events/s", before), spread(c.NoClock, "%.0f"), "", "", ""})
	add(row{"Apply rate of updates, each newer than its row by the clock: after",
		fmt.Sprintf("%.0f events/s", newer), spread(c.Newer, "%.0f"), fmt.Sprintf("%.2f× before%s", newer/before, runRatios(c.Newer, c.NoClock)),
		"≥ 0.95× before", status(ok)})
	add(row{fmt.Sprintf("Apply rate of updates, half older than their row (ledger only; %d rows kept their clock)", c.Kept),
		fmt.Sprintf("%.0f events/s", half), spread(c.HalfOlder, "%.0f"), fmt.Sprintf("%.2f× before%s", half/before, runRatios(c.HalfOlder, c.NoClock)), "", ""})
	rep.targets = append(rep.targets, fmt.Sprintf("Apply rate with the clock compared ≥ 95%% of the rate without it: %s (%.0f vs %.0f events/s, %.2f×).",
		status(ok), newer, before, newer/before))
}

// runRatios lists a/b run by run: the workloads of one run follow each other, so each
// ratio compares rates measured under nearly the same load.
func runRatios(a, b []float64) string {
	if len(a) < 2 || len(a) != len(b) {
		return ""
	}
	parts := make([]string, len(a))
	for i := range a {
		parts[i] = fmt.Sprintf("%.2f", a[i]/b[i])
	}
	return " (per run " + strings.Join(parts, ", ") + ")"
}

//go:build integration

package e2e

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSoakSchedulesReplayAndCoverEveryFault: a seed gives the same schedule every time;
// across seeds, every kind of step is drawn; every schedule heals what it broke and ends
// the same way; the reversed double rotation is drawn only behind its switch.
func TestSoakSchedulesReplayAndCoverEveryFault(t *testing.T) {
	opts := soakOptions()
	require.Equal(t, generateSchedule(42, opts).String(), generateSchedule(42, opts).String(), "the same seed, the same schedule")
	require.NotEqual(t, generateSchedule(42, opts).String(), generateSchedule(43, opts).String())

	seen := map[stepKind]int{}
	short := 0
	for seed := range uint64(2000) {
		sc := generateSchedule(seed, opts)
		if sc.short() {
			short++
		}
		cut, pg, temporal, isolated := map[int]bool{}, false, true, map[int]bool{}
		for i, st := range sc.steps {
			seen[st.kind]++
			require.NotEmpty(t, st.String())
			// A return published to before its word waits for the broker to be seen
			// empty: the service must be able to drain it.
			if (st.kind == stepRotateLate || st.kind == stepRotateSilent) && (&model{steps: sc.steps[:i]}).used(st.broker) {
				require.True(t, !cut[st.broker] && !pg && temporal, "seed %d step %d returns unannounced to a broker the service cannot drain:\n%s", seed, i+1, sc)
			}
			switch st.kind {
			case stepCutBroker:
				require.False(t, cut[st.broker], "seed %d step %d cuts a cut broker", seed, i+1)
				cut[st.broker] = true
			case stepRestoreBroker:
				require.True(t, cut[st.broker], "seed %d step %d restores a broker that is not cut", seed, i+1)
				delete(cut, st.broker)
			case stepCutPostgres:
				pg = true
			case stepRestorePostgres:
				pg = false
			case stepStopTemporal:
				temporal = false
			case stepStartTemporal:
				temporal = true
			case stepIsolateWorker:
				isolated[st.worker] = true
			case stepRejoinWorker, stepKillWorker, stepTermWorker:
				delete(isolated, st.worker)
			case stepCutOffSlow, stepCutOffDrain, stepForceHopReturn:
				require.True(t, len(cut) == 0 && !pg && temporal, "seed %d step %d holds a batch no window can take, or forces what cannot be applied:\n%s", seed, i+1, sc)
			case stepSettle, stepFinish:
				require.True(t, len(cut) == 0 && !pg && temporal && len(isolated) == 0,
					"seed %d step %d waits for the service with faults in place:\n%s", seed, i+1, sc)
			}
		}
		require.Equal(t, stepFinish, sc.steps[len(sc.steps)-1].kind, "seed %d ends with the finish", seed)
	}
	for k := stepPublish; k <= stepCutOffDrain; k++ {
		if k == stepRotateReversed && !opts.reversedDoubleRotation {
			require.Zero(t, seen[k], "a reversed double rotation drawn with its switch off")
			continue
		}
		require.Positive(t, seen[k], "no schedule of 2000 draws %q", step{kind: k}.String())
	}
	require.Positive(t, short, "no short schedule for make test")
	t.Logf("short schedules: %d of 2000; an example:\n%s", short, generateSchedule(7, opts))

	opts.reversedDoubleRotation = true
	reversed := 0
	for seed := range uint64(500) {
		for _, st := range generateSchedule(seed, opts).steps {
			if st.kind == stepRotateReversed {
				reversed++
			}
		}
	}
	require.Positive(t, reversed, "the switch turns the reversed double rotation on")

	// The unsettled draws: late by seconds and by minutes, twice, never, and a
	// cancel with a backlog; and nothing rotates after a rotation never notified but a force.
	kinds := map[string]int{}
	for seed := range uint64(2000) {
		unnotified, temporal, pg := false, true, true
		for i, st := range generateSchedule(seed, scheduleOptions{unsettled: true, reversedDoubleRotation: true}).steps {
			kinds[st.faultKind()]++
			switch st.kind {
			case stepStopTemporal, stepStartTemporal:
				temporal = st.kind == stepStartTemporal
			case stepCutPostgres, stepRestorePostgres:
				pg = st.kind == stepRestorePostgres
			}
			if st.kind == stepCancel {
				require.True(t, temporal && pg, "seed %d step %d cancels while the workflow cannot apply it", seed, i+1)
			}
			switch st.kind {
			case stepRotateNow, stepRotateTwice, stepRotateLate, stepRotateSilent, stepRotateReversed, stepCancel:
				require.False(t, unnotified, "seed %d step %d rotates after a rotation never notified", seed, i+1)
				unnotified = st.kind == stepRotateSilent || st.kind == stepCancel
			case stepForce, stepSettle:
				unnotified = false
			}
		}
	}
	for _, k := range []string{"rotate, publish, notify seconds late", "rotate, publish, notify minutes late",
		"rotate, publish, notify late twice", "rotate, never notify", "operator cancel with a backlog"} {
		require.Positive(t, kinds[k], "no schedule of 2000 draws %q", k)
	}

	// The cuts: a spare cut while it holds leftovers, and a worker cut off from
	// Temporal while its batch is slow to settle; only behind their switch, and an excuse
	// for every spare so cut, naming its broker.
	kinds = map[string]int{}
	for seed := range uint64(2000) {
		off := generateSchedule(seed, scheduleOptions{unsettled: true, reversedDoubleRotation: true})
		for _, st := range off.steps {
			require.False(t, st.kind == stepCutOffSlow || st.role == roleLeftovers, "seed %d draws a cut with its switch off", seed)
		}
		sc := generateSchedule(seed, soakOptions())
		seqs := make([]int64, len(sc.steps))
		for i := range seqs {
			seqs[i] = int64(10 * i)
		}
		ex := excuses(sc, seqs)
		n, pgCut := 0, false
		for i, st := range sc.steps {
			kinds[st.faultKind()]++
			switch st.kind {
			case stepCutPostgres, stepRestorePostgres:
				pgCut = st.kind == stepCutPostgres
			case stepForce:
				require.False(t, pgCut, "seed %d step %d forces a switch that cannot be applied before the next step", seed, i+1)
			}
			if st.role == roleLeftovers {
				require.Equal(t, st.broker, ex[n].Broker, "seed %d step %d", seed, i+1)
				require.Less(t, ex[n].From, int64(10*i), "seed %d step %d: the excuse begins before the cut", seed, i+1)
				n++
			}
		}
		require.Len(t, ex, n, "seed %d: one excuse per spare cut with leftovers", seed)
	}
	for _, k := range []string{"broker cut (" + roleLeftovers + ")", "worker cut off from Temporal, its batch slow to settle"} {
		require.Positive(t, kinds[k], "no schedule of 2000 draws %q", k)
	}

	// The force with a hop out and a return, both ways, and the cut-off Leftover Drain:
	// only behind their switches; the return goes to a broker the producer published to,
	// neither the forced one (unless the producer moved there) nor the one it hops to.
	kinds = map[string]int{}
	older := scheduleOptions{reversedDoubleRotation: true, unsettled: true, cuts: true, killHolder: true}
	for seed := range uint64(2000) {
		for _, st := range generateSchedule(seed, older).steps {
			require.False(t, st.kind == stepForceHopReturn || st.kind == stepCutOffDrain, "seed %d draws a step with its switch off", seed)
		}
		sc := generateSchedule(seed, soakOptions())
		for i, st := range sc.steps {
			kinds[st.faultKind()]++
			switch st.kind {
			case stepForceHopReturn:
				require.NotEqual(t, st.hop, st.back, "seed %d step %d", seed, i+1)
				require.NotEqual(t, st.broker, st.hop, "seed %d step %d hops to the forced broker", seed, i+1)
				require.True(t, st.back == st.active || st.here && st.back == st.broker, "seed %d step %d returns to a broker the producer never used", seed, i+1)
				require.Equal(t, stepSettle, sc.steps[i-1].kind, "seed %d step %d: nothing older waits", seed, i+1)
			case stepCutOffDrain:
				require.NotEqual(t, st.active, st.broker, "seed %d step %d", seed, i+1)
				require.Equal(t, stepSettle, sc.steps[i+1].kind, "seed %d step %d ends with a settle", seed, i+1)
			}
		}
	}
	for _, k := range []string{"force to the producer's broker, a hop out of it, a return", "force away from the producer's broker, a hop out, a return",
		"worker cut off from Temporal in a Leftover Drain, its batch slow to settle"} {
		require.Positive(t, kinds[k], "no schedule of 2000 draws %q", k)
	}
}

// TestSoakSchedulesDrawTheSlowWorld: a paused worker, a worker's silent link of each kind
// and a double rotation whose first word comes after its second hop committed or while
// it waits, each drawn in long and in short schedules, only behind its switch; a pause
// or a silence lasts 5 to 90 s (5 to 20 s in a short schedule) and leaves a live worker
// beside the slow one; the late first word follows a settle, onto two other brokers.
func TestSoakSchedulesDrawTheSlowWorld(t *testing.T) {
	kinds, shortKinds := map[string]int{}, map[string]int{}
	var longest time.Duration
	before := soakOptions()
	before.pauses, before.silentLinks, before.lateFirstWord = false, false, false
	opts := before
	opts.pauses, opts.silentLinks, opts.lateFirstWord = true, true, true
	for seed := range uint64(2000) {
		for _, st := range generateSchedule(seed, before).steps {
			require.False(t, st.kind == stepPauseWorker || st.kind == stepSilenceLink || st.kind == stepRotateReversedLate,
				"seed %d draws a slow fault with its switch off", seed)
		}
		sc := generateSchedule(seed, opts)
		live, isolated := map[int]bool{1: true}, map[int]bool{}
		for i, st := range sc.steps {
			kinds[st.faultKind()]++
			if sc.short() {
				shortKinds[st.faultKind()]++
			}
			switch st.kind {
			case stepKillWorker, stepTermWorker:
				delete(live, st.worker)
				delete(isolated, st.worker)
				live[st.next] = true
			case stepAddWorker:
				live[st.next] = true
			case stepIsolateWorker:
				isolated[st.worker] = true
			case stepRejoinWorker:
				delete(isolated, st.worker)
			case stepPauseWorker, stepSilenceLink:
				require.True(t, live[st.worker] && !isolated[st.worker], "seed %d step %d slows a worker that is gone or cut off:\n%s", seed, i+1, sc)
				require.GreaterOrEqual(t, len(live)-len(isolated), 2, "seed %d step %d slows the only worker that reaches Temporal:\n%s", seed, i+1, sc)
				limit := slowLong
				if sc.short() {
					limit = slowShort
				}
				require.True(t, st.pause >= slowMin && st.pause <= limit, "seed %d step %d lasts %s", seed, i+1, st.pause)
				longest = max(longest, st.pause)
				require.Positive(t, st.burst.Total(), "seed %d step %d publishes nothing while the worker is slow", seed, i+1)
				if st.kind == stepSilenceLink {
					require.Contains(t, []string{linkPostgres, linkBroker, linkTemporal, linkAll}, st.link)
					require.True(t, st.broker >= 0 && st.broker < soakBrokers)
				}
			case stepRotateReversedLate:
				prev := sc.steps[i-1]
				require.Equal(t, stepSettle, prev.kind, "seed %d step %d: nothing older waits", seed, i+1)
				require.NotEqual(t, st.active, st.broker, "seed %d step %d", seed, i+1)
				require.NotContains(t, []int{st.active, st.broker}, prev.active, "seed %d step %d rotates to the broker it reads", seed, i+1)
			}
		}
	}
	require.Greater(t, longest, 60*time.Second, "no pause or silence of over a minute")
	for _, k := range []string{"worker paused (SIGSTOP)", "worker's Postgres link silent", "worker's broker link silent",
		"worker's Temporal link silent", "worker's links all silent",
		"double rotation, the first word after the hop committed", "double rotation, the first word after the hop waits for it"} {
		require.Positive(t, kinds[k], "no schedule of 2000 draws %q", k)
		require.Positive(t, shortKinds[k], "no short schedule of 2000 draws %q", k)
	}
}

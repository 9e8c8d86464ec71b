package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"
)

// BenchmarkConvergeAfterReturn measures, in one run, the two numbers of the
// edge-resilience issue:
//
//   - s/converge: how long a cluster that was offline during an instantiate
//     (for longer than the backoff cap) takes, from the first answer of its API
//     server started again, until everything planned for it is Applied there
//     (status and objects); -benchtime=Nx averages N returns;
//   - redundant-%: the share of applies that changed nothing (result
//     "unchanged") over a few rounds of instantiate / update / terminate, each
//     with the hub SIGKILLed and started again (ATOLL_BENCH_CRASHES rounds,
//     default 6; ATOLL_CRASH_SEED replays a seed). Half of the kills come
//     within 150 ms of the call, while its applies are in flight
//     (ATOLL_CRASH_EARLY sets the share), so this is close to the worst case;
//     TestResilienceHubCrash spreads them evenly over 0–1500 ms.
//
// Run it with
//
//	go test -run '^$' -bench ConvergeAfterReturn ./test/e2e/
func BenchmarkConvergeAfterReturn(b *testing.B) {
	w := newCrashWorld(b, 3)
	var total time.Duration
	n := 0
	for b.Loop() {
		total += w.convergeAfterReturn(len(w.fleet.kube) - 1)
		n++
	}

	crashes := 6
	if s := os.Getenv("ATOLL_BENCH_CRASHES"); s != "" {
		v, err := strconv.Atoi(s)
		mustTB(b, "ATOLL_BENCH_CRASHES", err)
		crashes = v
	}
	seed := crashSeed(b)
	early := crashEarly(b, 0.5)
	b.Logf("crash seed %d, %d rounds, %.0f%% of the kills within 150ms of the call", seed, crashes, 100*early)
	// Count only the applies of the crash rounds: start from the current hub's counters.
	base, err := scrapeApplies(w.hub.url)
	mustTB(b, "metrics", err)
	w.applies = applyCounts{}
	for k, v := range base {
		w.applies[k] = -v
	}
	rep := w.crashRounds(crashPlan(rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), crashes, early), time.Duration(crashes)*30*time.Second)
	w.finish()
	_, share := w.applies.share()
	b.Logf("cluster back → Applied: %s on average over %d runs; %d kills: applies %s (%d counters unread), redundant %.2f%%",
		(total / time.Duration(n)).Round(time.Millisecond), n, rep.kills, w.applies, w.lost, 100*share)
	b.ReportMetric(total.Seconds()/float64(n), "s/converge")
	b.ReportMetric(100*share, "redundant-%")
}

// convergeAfterReturn stops a cluster, instantiates the DIG, lets the cluster
// stay away beyond the backoff cap, starts it again and returns how long it
// took from then until the DIG was Applied there. It terminates the DIG after.
func (w *crashWorld) convergeAfterReturn(down int) time.Duration {
	tb := w.tb
	tb.Helper()
	ctx := context.Background()
	name := w.fleet.names[down]
	nClusters := len(w.fleet.kube)
	mustTB(tb, "stop "+name, w.fleet.clusters[down].Stop(ctx))
	eventually(tb, 30*time.Second, name+" unreachable", func() (bool, string) {
		st, err := w.c.ClusterStatus(ctx, resProvider, name)
		return err == nil && unreachable(st), fmt.Sprintf("%+v %v", st, err)
	})
	mustTB(tb, "instantiate", lifecycleCall(w.c, w.dig, "instantiate", nil))
	eventually(tb, 30*time.Second, "Applied but on "+name, func() (bool, string) {
		st, err := getDIG(w.c, w.dig, "status=deployed")
		if err != nil {
			return false, err.Error()
		}
		ok := allIn(st.on(name), "Pending", w.perCluster())
		for i, other := range w.fleet.names {
			ok = ok && (i == down || allIn(st.on(other), "Applied", w.perCluster()))
		}
		return ok, st.String()
	})
	time.Sleep(2*resBackoffCap + time.Second)

	// The cluster is back from the first moment its API server answers, which
	// is before Restart returns (that waits for /readyz).
	answered := make(chan time.Time, 1)
	stopProbe := make(chan struct{})
	go func() {
		rc := w.fleet.kube[down].Discovery().RESTClient()
		for {
			select {
			case <-stopProbe:
				return
			default:
			}
			pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			_, err := rc.Get().AbsPath("/version").DoRaw(pctx)
			cancel()
			if err == nil {
				answered <- time.Now()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	restarted := time.Now()
	mustTB(tb, "restart "+name, w.fleet.clusters[down].Restart(ctx))
	var back time.Time
	select {
	case back = <-answered:
	case <-time.After(10 * time.Second):
		close(stopProbe)
		tb.Fatalf("%s was restarted but /version never answered", name)
	}
	want := w.perCluster()
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, err := getDIG(w.c, w.dig, "status=deployed")
		objs, oerr := digObjects(w.fleet.kube[down], w.setup.dig)
		if err == nil && oerr == nil && allIn(st.DeployedCounts, "Applied", want*nClusters) && len(objs) == want {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s not Applied within 60s of returning: %s %v; it holds %v %v", name, st, err, objKeys(objs), oerr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	took := time.Since(back)
	tb.Logf("%s answered %s after the restart began; Applied there %s after it answered", name,
		back.Sub(restarted).Round(time.Millisecond), took.Round(time.Millisecond))
	mustTB(tb, "terminate", lifecycleCall(w.c, w.dig, "terminate", nil))
	eventually(tb, 30*time.Second, "Terminated", func() (bool, string) {
		st, err := getDIG(w.c, w.dig, "status=deployed")
		return err == nil && st.Status == "Terminated", fmt.Sprintf("%s %v", st, err)
	})
	return took
}

package reconciler

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/nodevol/nodevol/internal/executor"
	"github.com/nodevol/nodevol/volume"
)

// Reproduce:
//
//	go test -run '^$' -bench . -benchmem ./reconciler

// memPlugin sets volumes up and tears them down in memory; TearDown
// reports its start on a channel.
type memPlugin struct{ tornDown chan string }

type memVolume struct {
	p    *memPlugin
	path string
}

func (p *memPlugin) Name() string                   { return "example.com/mem" }
func (p *memPlugin) CanSupport(s *volume.Spec) bool { return s.Other == "mem" }
func (p *memPlugin) NewMounter(s *volume.Spec, pod *volume.Pod) (volume.Mounter, error) {
	return memVolume{p: p, path: pod.UID + "/" + s.Name}, nil
}
func (p *memPlugin) NewUnmounter(vol, uid string) (volume.Unmounter, error) {
	return memVolume{p: p, path: uid + "/" + vol}, nil
}
func (v memVolume) SetUp(context.Context, volume.MounterArgs) error { return nil }
func (v memVolume) Path() string                                    { return v.path }
func (v memVolume) TearDown(context.Context) error {
	if v.p.tornDown != nil {
		v.p.tornDown <- v.path
	}
	return nil
}

func memPod(uid string, n int) *volume.Pod {
	p := &volume.Pod{UID: uid}
	for i := range n {
		p.Volumes = append(p.Volumes, volume.Spec{Name: fmt.Sprintf("v%d", i), Other: "mem"})
	}
	return p
}

// steadyManager has 10,000 pods × 5 volumes desired and mounted, with
// nothing left to do.
func steadyManager(b *testing.B) *Manager {
	b.Helper()
	p := &memPlugin{}
	logger := klog.NewKlogr().V(10)
	m, err := New(Options{Root: b.TempDir(), Plugins: []volume.Plugin{p}, Logger: &logger})
	if err != nil {
		b.Fatal(err)
	}
	m.sourcesReady.Store(true)
	for i := range 10000 {
		pod := memPod(fmt.Sprintf("pod-%05d", i), 5)
		if err := m.AddPod(pod); err != nil {
			b.Fatal(err)
		}
		for j := range pod.Volumes {
			s := &pod.Volumes[j]
			m.asw.MarkMounted(executor.MountedVolume{VolumeName: uniqueName(p, pod.UID, s.Name), PodUID: pod.UID, InnerName: s.Name, Plugin: p, Spec: s})
		}
	}
	m.pass(context.Background(), true) // settle: nothing to do afterwards
	return m
}

func BenchmarkPass(b *testing.B) {
	m := steadyManager(b)
	ctx := context.Background()
	b.Run("steady-10000x5", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m.pass(ctx, false)
		}
	})
	b.Run("full-resync-10000x5", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m.pass(ctx, true)
		}
	})
	if n := m.x.Operations().Len(); n != 0 {
		b.Fatalf("a steady pass started %d operations", n)
	}
}

// BenchmarkRemovePodToTearDown measures the latency from RemovePod to the
// start of the plugin's TearDown: event-driven, and with events disabled
// and a 100 ms polling loop (the kubelet's reconciler period) as baseline.
func BenchmarkRemovePodToTearDown(b *testing.B) {
	for _, mode := range []struct {
		name     string
		opts     Options
		pollOnly bool
	}{
		{"event-driven", Options{ResyncPeriod: time.Minute}, false},
		{"polling-100ms", Options{ResyncPeriod: 100 * time.Millisecond}, true},
	} {
		b.Run(mode.name, func(b *testing.B) {
			p := &memPlugin{tornDown: make(chan string, 1)}
			opts := mode.opts
			opts.Root, opts.Plugins = b.TempDir(), []volume.Plugin{p}
			logger := klog.NewKlogr().V(10)
			opts.Logger = &logger
			m, err := New(opts)
			if err != nil {
				b.Fatal(err)
			}
			m.pollOnly = mode.pollOnly
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go m.Run(ctx)
			m.MarkSourcesReady()
			var total time.Duration
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				uid := fmt.Sprintf("pod-%d", i)
				if err := m.AddPod(memPod(uid, 1)); err != nil {
					b.Fatal(err)
				}
				wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
				if err := m.WaitForMount(wctx, uid); err != nil {
					b.Fatal(err)
				}
				wcancel()
				b.StartTimer()
				start := time.Now()
				m.RemovePod(uid)
				<-p.tornDown
				total += time.Since(start)
			}
			b.ReportMetric(float64(total.Microseconds())/float64(b.N)/1000, "ms/teardown-start")
		})
	}
}

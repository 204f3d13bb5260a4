//go:build !linux

package promtext

const processMetricsSupported = false

func (p *processMetrics) update() {}

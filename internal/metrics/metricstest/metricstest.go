// Package metricstest reads Prometheus metrics in tests: it scrapes a
// /metrics endpoint (or gathers a registry) and looks up one series' value
// by name and labels.
package metricstest

import (
	"fmt"
	"maps"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families are scraped metric families by name.
type Families map[string]*dto.MetricFamily

// Scrape fetches url (a /metrics endpoint) and parses the text exposition.
// It fails the test on any error or a status other than 200.
func Scrape(t testing.TB, url string) Families {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("scraping %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scraping %s: status %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing %s: %v", url, err)
	}
	return fams
}

// Gather collects g's metrics.
func Gather(t testing.TB, g prometheus.Gatherer) Families {
	t.Helper()
	list, err := g.Gather()
	if err != nil {
		t.Fatalf("gathering: %v", err)
	}
	out := Families{}
	for _, f := range list {
		out[f.GetName()] = f
	}
	return out
}

// Value returns the value of the series of name whose labels are exactly
// labels (a counter's or gauge's value, a histogram's sample count), and
// whether it exists.
func (f Families) Value(name string, labels map[string]string) (float64, bool) {
	fam := f[name]
	if fam == nil {
		return 0, false
	}
	for _, m := range fam.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		if !maps.Equal(got, labels) && !(len(got) == 0 && len(labels) == 0) {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		}
	}
	return 0, false
}

// Want checks that the series of name with labels has value want.
func (f Families) Want(name string, labels map[string]string, want float64) error {
	got, ok := f.Value(name, labels)
	if !ok {
		return fmt.Errorf("%s%v: no such series", name, labels)
	}
	if got != want {
		return fmt.Errorf("%s%v = %v, want %v", name, labels, got, want)
	}
	return nil
}

// L builds a label map from name, value pairs.
func L(pairs ...string) map[string]string {
	out := map[string]string{}
	for i := 0; i+1 < len(pairs); i += 2 {
		out[pairs[i]] = pairs[i+1]
	}
	return out
}

package ui_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/internal/fill"
	"github.com/duroq/duroq/sqliteprovider"
	"github.com/duroq/duroq/ui"
)

// BenchmarkPages renders the UI's pages, request to HTML, over a SQLite file of
// 1,000 and of 100,000 instances (internal/fill): the listing's first page, a page
// deep in it, a filtered page, an instance page and the overview. A listing page
// must cost the same at both sizes, well under 100 ms.
func BenchmarkPages(b *testing.B) {
	for _, n := range []int{1000, 100000} {
		b.Run(fmt.Sprintf("instances=%d", n), func(b *testing.B) {
			p, err := sqliteprovider.Open(filepath.Join(b.TempDir(), "ui.db"), sqliteprovider.Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { p.Close() })
			start := time.Now()
			if err := fill.Instances(b.Context(), p.Store().(eventstore.TxStore), n, fill.Options{Prefix: "i-"}); err != nil {
				b.Fatal(err)
			}
			b.Logf("filled %d instances in %v", n, time.Since(start).Round(time.Millisecond))
			h, err := ui.New(ui.Options{Provider: p, Queues: p.Queue()})
			if err != nil {
				b.Fatal(err)
			}
			for _, page := range []struct{ name, path string }{
				{"listing", "/instances"},
				{"listing-deep", "/instances?after=" + fill.ID("i-", n/2)},
				{"listing-running", "/instances?status=Running"},
				{"instance", "/instance?id=" + fill.ID("i-", n/2+3)},
				{"overview", "/"},
			} {
				b.Run(page.name, func(b *testing.B) {
					for b.Loop() {
						rec := httptest.NewRecorder()
						h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, page.path, nil))
						if rec.Code != http.StatusOK {
							b.Fatalf("GET %s: %d\n%.500s", page.path, rec.Code, rec.Body.String())
						}
					}
				})
			}
		})
	}
}

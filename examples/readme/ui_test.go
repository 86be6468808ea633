package readme_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/duroq/duroq/sqliteprovider"
	"github.com/duroq/duroq/ui"
)

// The web UI (README): mounted in an application's own mux under /duroq, behind
// whatever authentication the application has.
func Example_ui() {
	dir, err := os.MkdirTemp("", "duroq-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	p, err := sqliteprovider.Open(filepath.Join(dir, "app.db"), sqliteprovider.Options{})
	if err != nil {
		panic(err)
	}
	defer p.Close()

	ops, err := ui.New(ui.Options{
		Provider: p,         // instances, histories, cancel / raise / delete
		Queues:   p.Queue(), // queues, dead letters, redrive
		Prefix:   "/duroq",  // where it is mounted
		ReadOnly: false,     // true: look, never touch
	})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/duroq/", http.StripPrefix("/duroq", ops)) // wrap it in your auth middleware

	srv := httptest.NewServer(mux)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/duroq/instances")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	page, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.Status, strings.Contains(string(page), "No instance matches."))
	// Output: 200 OK true
}

package inboxui_test

import (
	"context"
	"database/sql"
	"log"
	"net/http"
	"os"

	_ "modernc.org/sqlite"

	"github.com/watermill-inbox/inbox/inboxui"
	"github.com/watermill-inbox/inbox/sqlitestore"
)

// The page mounted in a program's own server, under /ops/inbox/, behind a password.
func Example() {
	db, err := sql.Open("sqlite", sqlitestore.DSN(os.TempDir()+"/inboxui-example.db"))
	if err != nil {
		log.Fatal(err)
	}
	store, err := sqlitestore.New(db, sqlitestore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	_ = store.CreateSchema(context.Background())

	ui, err := inboxui.New(inboxui.Config{
		Store:     store,
		Path:      "/ops/inbox/",
		Authorize: inboxui.BasicAuth("ops", "a long password from your secrets"),
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/inbox/", ui)
	_ = mux // http.ListenAndServeTLS(addr, cert, key, mux)
}

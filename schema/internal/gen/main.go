// Command gen writes the files of package migrations from the sequences of package
// schema (schema/steps): go generate ./schema. schema's TestMigrationFilesAreGenerated
// fails when they differ.
package main

import (
	"log"
	"os"
	"path/filepath"

	"github.com/watermill-inbox/inbox/schema"
)

func main() {
	dir := filepath.Join("..", "migrations") // go generate runs in schema/
	for name, body := range schema.MigrationFiles() {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			log.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			log.Fatal(err)
		}
	}
}

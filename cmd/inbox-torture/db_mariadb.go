package main

import (
	"context"
	"errors"
)

func openMariaDB(ctx context.Context, o options, worker bool) (database, error) {
	return nil, errors.New("mariadb: the MySQL store has not landed yet")
}

-- name: Credit :exec
UPDATE wallets SET cents = cents + $1 WHERE id = $2;

-- name: Cents :one
SELECT cents FROM wallets WHERE id = $1;

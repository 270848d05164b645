CREATE TABLE wallets (
    id    bigint PRIMARY KEY,
    cents bigint NOT NULL DEFAULT 0
);

-- Announce every new row, so services in other processes wake their
-- watchers (LISTEN slm_receipts).
CREATE FUNCTION slm_notify_receipt() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('slm_receipts', NEW.seq::text);
    RETURN NEW;
END $$;
CREATE TRIGGER loop_execution_receipts_notify AFTER INSERT ON loop_execution_receipts
    FOR EACH ROW EXECUTE FUNCTION slm_notify_receipt();

-- Announce every new row, so services in other processes wake their
-- watchers (LISTEN slm_memories).
CREATE FUNCTION slm_notify_memory() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('slm_memories', NEW.id::text);
    RETURN NEW;
END $$;
CREATE TRIGGER memories_notify AFTER INSERT ON memories
    FOR EACH ROW EXECUTE FUNCTION slm_notify_memory();

/**
 * V8 quotes the text around the bad token in some JSON.parse messages (`Unexpected token 'S',
 * ..."":{"note":SENTINEL-M"... is not valid JSON`): about twenty characters of a request's meta or
 * tensor data, or of a data-set line. Such a message becomes a result's or dead letter's error,
 * `dlq list` prints it, and a logged FleetError prints its causes' messages too.
 */
const QUOTED = /,?\s*(?:\.\.\.)?"[\s\S]*"(?:\.\.\.)?\s+is not valid JSON$/;

/**
 * `err` (thrown by JSON.parse) as a SyntaxError whose message quotes nothing of the text: the
 * message to put in a FleetError and the cause to keep under it. Messages without a quote
 * (`... in JSON at position 40`, `Unexpected end of JSON input`) stay as they are.
 */
export function jsonSyntaxError(err: unknown): SyntaxError {
  const message = err instanceof Error ? err.message : String(err);
  if (!QUOTED.test(message)) return err instanceof SyntaxError ? err : new SyntaxError(message);
  return new SyntaxError(withoutJsonQuote(message));
}

/**
 * `message` without a V8 JSON.parse quote at its end: also for messages already stored with one
 * (dead letters written before the codec dropped it, which `dlq list` still shows).
 */
export function withoutJsonQuote(message: string): string {
  if (!QUOTED.test(message)) return message;
  const left = message.replace(QUOTED, '');
  return left === '' ? 'not valid JSON' : left;
}

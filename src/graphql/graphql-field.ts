import type { ExecutionContext } from '@nestjs/common';
import { type GraphQLResolveInfo, OperationTypeNode } from 'graphql';

/** A root field of a GraphQL operation, as its resolver is called: `(root, args, context, info)`. */
export interface GraphqlField {
  /** The field's arguments. */
  args: Record<string, unknown>;
  info: GraphQLResolveInfo;
  /** The request's headers (Express's `req` or Fastify's `request` in the GraphQL context), when there is one. */
  headers: Record<string, string | string[] | undefined> | undefined;
}

interface GraphqlRequestContext {
  req?: { headers?: GraphqlField['headers'] };
  request?: { headers?: GraphqlField['headers'] };
}

export function graphqlFieldOf(context: ExecutionContext): GraphqlField {
  const [, args, requestContext, info] =
    context.getArgs<[unknown, Record<string, unknown>, GraphqlRequestContext | undefined, GraphQLResolveInfo]>();
  return { args: args ?? {}, info, headers: (requestContext?.req ?? requestContext?.request)?.headers };
}

/** Whether the field is a root field of a mutation: what the module claims (queries and nested fields are read-only). */
export function isRootMutationField({ info }: GraphqlField): boolean {
  return info.operation.operation === OperationTypeNode.MUTATION && info.path.prev === undefined;
}
